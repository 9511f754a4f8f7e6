package raftstore

import "github.com/hashicorp/raft"

// await returns f's error, or raft.ErrRaftShutdown once the node stops.
//
// f.Error() alone can wait forever: raft hands the futures of committed
// entries (writes, barriers) to its state machine through a queue, and
// drops whatever is still queued when it shuts down, answering none of
// them. A goroutine of the node waiting like that would hold Shutdown,
// which waits for them all; a caller would never get an answer.
func (n *Node) await(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.ctx.Done():
		// It may yet be answered (the shutdown is racing it): prefer
		// the answer if it is already there.
		select {
		case err := <-done:
			return err
		default:
		}
		return raft.ErrRaftShutdown
	}
}
