package discovery

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// Multi queries several sources at once and merges their answers. It is
// itself a [Source], and safe for concurrent use.
type Multi struct {
	sources []Source
}

var _ Source = (*Multi)(nil)

// NewMulti returns a source made of sources. Nil sources are ignored. It
// does not take ownership: the caller still closes sources such as [File].
func NewMulti(sources ...Source) *Multi {
	m := &Multi{}
	for _, s := range sources {
		if s != nil {
			m.sources = append(m.sources, s)
		}
	}
	return m
}

// Name returns "multi(name, name, ...)" with the names of the sources.
func (m *Multi) Name() string {
	names := make([]string, len(m.sources))
	for i, s := range m.sources {
		names[i] = s.Name()
	}
	return "multi(" + strings.Join(names, ", ") + ")"
}

// Lookup queries all sources concurrently and waits for all of them (bound
// the wait with ctx). It returns the sorted, de-duplicated union of the
// addresses of every source, including the addresses a failing source
// returned along with its error.
//
// The error joins one [*SourceError] per failing source, naming it, so the
// caller can log it. It never means the addresses are unusable: one source
// failing does not hide the others, and addrs holds everything found even
// when the error is non-nil. Only when every source failed are both an empty
// answer and an error returned; even then it does not mean "no peers exist".
// A Multi without sources answers with nothing and a nil error.
func (m *Multi) Lookup(ctx context.Context) ([]string, error) {
	type result struct {
		addrs []string
		err   error
	}
	results := make([]result, len(m.sources))
	var wg sync.WaitGroup
	for i, s := range m.sources {
		wg.Go(func() {
			addrs, err := s.Lookup(ctx)
			if err != nil {
				err = &SourceError{Source: s.Name(), Err: err}
			}
			results[i] = result{addrs: addrs, err: err}
		})
	}
	wg.Wait()

	var (
		addrs []string
		errs  []error
	)
	for _, r := range results {
		addrs = append(addrs, r.addrs...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return sortedUnique(addrs), errors.Join(errs...)
}

// Watch returns a channel that receives a value (coalesced, like
// [Notifier.Changes]) whenever any source that implements [Notifier] may have
// changed, so that the caller can look up again at once instead of waiting
// for its next poll. The forwarding stops when ctx ends; the channel is never
// closed. If no source is a Notifier, the channel never receives.
//
// The sources' channels are shared, not copied: each of their values goes to
// only one receiver. Call Watch once per Multi and do not also read the
// sources' Changes channels directly.
func (m *Multi) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	for _, s := range m.sources {
		n, ok := s.(Notifier)
		if !ok {
			continue
		}
		in := n.Changes()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-in:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}
