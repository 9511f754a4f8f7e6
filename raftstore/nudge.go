package raftstore

// NudgeFollowers asks the leader to tell the followers the commit index
// now rather than a commit timeout later (see nudge). The agent calls it
// after committing an action's end, which an operator waits for through
// any member. On a follower it does nothing: its writes are forwarded, and
// the leader nudges after each.
func (n *Node) NudgeFollowers() { n.nudge() }
