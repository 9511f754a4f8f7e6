package raftstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bagkeeper/bagkeeper/raftstore/peerpb"
	"github.com/bagkeeper/bagkeeper/raftstore/state"
	"github.com/bagkeeper/bagkeeper/raftstore/storepb"
)

// Divergence detection, as etcd's corruption check does it: checksums
// catch bytes that changed on disk, but not a state machine that applied
// the same log differently (a bug, a build that behaves otherwise, memory
// that flipped a bit). So members compare their states themselves:
//
//   - now and then the leader commits a HashState command, which changes
//     nothing; every member, having applied it, hashes its state as of that
//     index (in the background; a State never changes) and keeps the last
//     few hashes, which it reports in its Info;
//   - the leader, which asks every member for its Info anyway, compares the
//     hashes members report for the same index; a member whose hash differs
//     from the one most members have is recorded as diverged, through raft,
//     so every member and `bagkeeper status` know;
//   - a diverged member serves nothing (it is not ready) until its data dir
//     is moved away and it rejoins as a new member; the record of a member
//     that left the group is dropped.

// ErrDiverged is wrapped by the error of a call on a member whose state
// was found unlike the others'.
var ErrDiverged = errors.New("this member's state diverged from the group's")

// keptHashes is how many hash points a member remembers.
const keptHashes = 4

// stateHashes is a member's hashes of its own state at recent hash points.
type stateHashes struct {
	mu      sync.Mutex
	hashes  []*peerpb.StateHash // oldest first
	pending chan *state.State
}

func newStateHashes() *stateHashes {
	return &stateHashes{pending: make(chan *state.State, 1)}
}

// point is called by the state machine at a hash point. It never blocks:
// if the previous point is still being hashed, this one is skipped (the
// leader compares only the indexes members report).
func (h *stateHashes) point(s *state.State) {
	select {
	case h.pending <- s:
	default:
	}
}

// run hashes the points handed to it until ctx ends.
func (h *stateHashes) run(ctx context.Context, log func(msg string, args ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-h.pending:
			start := time.Now()
			sum, err := state.HashState(s)
			if err != nil {
				log("hashing the state failed", "index", s.Index(), "err", err)
				continue
			}
			h.mu.Lock()
			h.hashes = append(h.hashes, &peerpb.StateHash{Index: s.Index(), Hash: sum})
			if len(h.hashes) > keptHashes {
				h.hashes = h.hashes[len(h.hashes)-keptHashes:]
			}
			h.mu.Unlock()
			log("state hashed", "index", s.Index(), "hash", short(sum), "took", time.Since(start))
		}
	}
}

// list returns the remembered hashes, oldest first.
func (h *stateHashes) list() []*peerpb.StateHash {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*peerpb.StateHash(nil), h.hashes...)
}

// checkStates is the leader's part: it proposes a hash point every
// StateCheckInterval, compares the hashes members reported, records the
// members that diverged, and forgets those that left.
func (n *Node) checkStates(ctx context.Context) {
	now := n.cfg.Now()
	if n.cfg.StateCheckInterval > 0 && now.Sub(n.lastHashPoint) >= n.cfg.StateCheckInterval {
		n.lastHashPoint = now
		go func() {
			actx, cancel := context.WithTimeout(ctx, n.attemptTimeout(0))
			defer cancel()
			if _, err := n.Apply(actx, state.NewCommand(state.HashStateOp())); err != nil {
				n.log.Debug("hash point not committed", "err", err)
			}
		}()
	}
	cfg, err := n.Configuration()
	if err != nil {
		return
	}
	reports := n.health.stateHashes()
	reports[n.id] = n.hashes.list()
	st := n.fsm.State()
	for _, d := range findDivergence(cfg, reports) {
		if _, known := st.Diverged(string(d.member)); known {
			continue
		}
		n.log.Error("a member's state differs from the others' at the same index: it serves nothing from now on",
			"diverged", string(d.member), "index", d.index, "hash", short(d.hash), "expected", short(d.expected))
		n.leaderDuty(ctx, "recording a diverged member", state.ReportDivergenceOp(string(d.member), d.index, d.hash, d.expected))
	}
	if _, ok := n.Diverged(); ok && n.IsLeader() {
		// This leader's own state is the odd one: let a member whose state
		// agrees with the others lead.
		if err := n.await(n.raft.LeadershipTransfer()); err != nil {
			n.log.Warn("handing leadership over from a diverged member", "err", err)
		}
		return
	}
	inCfg := map[string]bool{}
	for _, s := range cfg.Servers {
		inCfg[string(s.ID)] = true
	}
	for _, d := range st.Divergences() {
		if !inCfg[d.Member] {
			n.leaderDuty(ctx, "forgetting a diverged member that left", state.ForgetDivergenceOp(d.Member))
		}
	}
}

// leaderDuty commits one op of the leader's own.
func (n *Node) leaderDuty(ctx context.Context, what string, op *storepb.Op) {
	actx, cancel := context.WithTimeout(ctx, n.attemptTimeout(0))
	defer cancel()
	if _, err := n.Apply(actx, state.NewCommand(op)); err != nil {
		n.log.Warn(what, "err", err)
	}
}

// diverged is one member whose state hash differs from the majority's.
type diverged struct {
	member         raft.ServerID
	index          uint64
	hash, expected []byte
}

// findDivergence compares, for each index some members hashed, the hashes
// of the members of cfg; a member whose hash differs from one that more
// than half of the reporting members share (and at least two) diverged.
func findDivergence(cfg raft.Configuration, reports map[raft.ServerID][]*peerpb.StateHash) []diverged {
	byIndex := map[uint64]map[raft.ServerID][]byte{}
	for _, s := range cfg.Servers {
		for _, h := range reports[s.ID] {
			if byIndex[h.GetIndex()] == nil {
				byIndex[h.GetIndex()] = map[raft.ServerID][]byte{}
			}
			byIndex[h.GetIndex()][s.ID] = h.GetHash()
		}
	}
	seen := map[raft.ServerID]bool{}
	var out []diverged
	for index, hashes := range byIndex {
		counts := map[string]int{}
		for _, h := range hashes {
			counts[string(h)]++
		}
		var major []byte
		for h, c := range counts {
			if c >= 2 && 2*c > len(hashes) {
				major = []byte(h)
			}
		}
		if major == nil {
			continue
		}
		for id, h := range hashes {
			if !bytes.Equal(h, major) && !seen[id] {
				seen[id] = true
				out = append(out, diverged{member: id, index: index, hash: h, expected: major})
			}
		}
	}
	return out
}

// Diverged reports whether this member was found to have a state unlike
// the others'.
func (n *Node) Diverged() (string, bool) {
	d, ok := n.fsm.State().Diverged(string(n.id))
	if !ok {
		return "", false
	}
	return fmt.Sprintf("this member's state differs from the group's at raft index %d (hash %s, most members have %s), found %s: it serves nothing; move its data dir away and restart it to rejoin as a new member",
		d.Index, short(d.Hash), short(d.Expected), d.Since.UTC().Format(time.RFC3339)), true
}

// short is the first bytes of a hash, in hex.
func short(h []byte) string {
	return hex.EncodeToString(h[:min(len(h), 8)])
}
