package main

import (
	"context"
	"sync"
	"time"
)

// discoverBackoff is how long a writer waits before asking the members
// again when none of them knows a leader (during an election).
const discoverBackoff = 5 * time.Millisecond

// picker chooses the member a writer sends its next attempt to: the known
// target while it is of the preferred kind, otherwise the outcome of a
// discovery round, which concurrent attempts share.
type picker struct {
	// discover asks the members; it returns the member to send to (-1 if
	// none knows a leader) and whether it is of the preferred kind.
	discover func(context.Context) (target int, preferred bool)

	mu        sync.Mutex
	target    int        // member to send to; -1 if unknown
	preferred bool       // target is of the preferred kind
	inflight  *discovery // the discovery running now, if any
}

// discovery is one round of asking the members who leads.
type discovery struct {
	done      chan struct{}
	target    int
	preferred bool
}

func newPicker(discover func(context.Context) (int, bool)) *picker {
	return &picker{discover: discover, target: -1}
}

// pick returns the member for the next attempt.
func (p *picker) pick(ctx context.Context) (int, error) {
	for {
		p.mu.Lock()
		if p.target >= 0 && p.preferred {
			t := p.target
			p.mu.Unlock()
			return t, nil
		}
		d := p.inflight
		owner := d == nil
		if owner {
			d = &discovery{done: make(chan struct{})}
			p.inflight = d
		}
		p.mu.Unlock()

		if owner {
			d.target, d.preferred = p.discover(ctx)
			if d.target < 0 {
				// Nobody knows a leader: an election is running. Back off a
				// little, holding the round so that concurrent attempts wait
				// instead of asking again.
				t := time.NewTimer(discoverBackoff)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
			}
			p.mu.Lock()
			p.inflight = nil
			if d.target >= 0 {
				p.target, p.preferred = d.target, d.preferred
			}
			p.mu.Unlock()
			close(d.done)
		} else {
			select {
			case <-d.done:
			case <-ctx.Done():
				return -1, ctx.Err()
			}
		}
		if d.target >= 0 {
			return d.target, nil
		}
		if err := ctx.Err(); err != nil {
			return -1, err
		}
	}
}

// forget drops member i as the target after a failed attempt.
func (p *picker) forget(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.target == i {
		p.target, p.preferred = -1, false
	}
}
