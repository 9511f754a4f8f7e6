package discovery

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSource answers with fixed addresses and error, or runs lookup if set.
type fakeSource struct {
	name   string
	addrs  []string
	err    error
	lookup func(ctx context.Context) ([]string, error)
}

func (f *fakeSource) Name() string { return f.name }

func (f *fakeSource) Lookup(ctx context.Context) ([]string, error) {
	if f.lookup != nil {
		return f.lookup(ctx)
	}
	return append([]string(nil), f.addrs...), f.err
}

func mustStatic(t *testing.T, addrs ...string) *Static {
	t.Helper()
	s, err := NewStatic(addrs)
	if err != nil {
		t.Fatalf("NewStatic: %v", err)
	}
	return s
}

func TestMultiReturnsSortedUnionWithoutDuplicates(t *testing.T) {
	t.Parallel()
	m := NewMulti(
		mustStatic(t, "peer-2.app:7000", "peer-0.app:7000"),
		mustStatic(t, "peer-1.app:7000", "peer-0.app:7000"),
		&fakeSource{name: "empty", addrs: nil},
		nil,
	)
	got, err := m.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"peer-0.app:7000", "peer-1.app:7000", "peer-2.app:7000"})
}

func TestMultiOneFailingSourceDoesNotHideTheOthers(t *testing.T) {
	t.Parallel()
	failure := errors.New("server misbehaving")
	m := NewMulti(
		mustStatic(t, "peer-0.app:7000"),
		&fakeSource{name: `dns-srv "_raft._tcp.app"`, err: failure},
		&fakeSource{name: "other", addrs: []string{"peer-1.app:7000"}},
	)
	got, err := m.Lookup(testContext(t))
	assertAddrs(t, got, []string{"peer-0.app:7000", "peer-1.app:7000"})
	if !errors.Is(err, failure) {
		t.Fatalf("error %v, want one wrapping the failing source's error", err)
	}
	var se *SourceError
	if !errors.As(err, &se) || se.Source != `dns-srv "_raft._tcp.app"` {
		t.Fatalf("error %v: want a *SourceError naming the failing source", err)
	}
	if !strings.Contains(err.Error(), `dns-srv "_raft._tcp.app"`) {
		t.Errorf("error %q does not name the failing source", err)
	}
}

func TestMultiKeepsAddressesOfPartiallyFailingSource(t *testing.T) {
	t.Parallel()
	m := NewMulti(&fakeSource{
		name:  "file",
		addrs: []string{"peer-0.app:7000"},
		err:   errors.New("peers:2: bad line"),
	})
	got, err := m.Lookup(testContext(t))
	assertAddrs(t, got, []string{"peer-0.app:7000"})
	if err == nil || !strings.Contains(err.Error(), "peers:2: bad line") {
		t.Errorf("error %v, want the source's error", err)
	}
}

func TestMultiAllSourcesFailingReturnsEveryError(t *testing.T) {
	t.Parallel()
	errA, errB := errors.New("failure A"), errors.New("failure B")
	m := NewMulti(&fakeSource{name: "a", err: errA}, &fakeSource{name: "b", err: errB})
	got, err := m.Lookup(testContext(t))
	assertAddrs(t, got, nil)
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("error %v, want one wrapping both sources' errors", err)
	}
	for _, want := range []string{"source a: failure A", "source b: failure B"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestMultiWithoutSourcesAnswersNothing(t *testing.T) {
	t.Parallel()
	got, err := NewMulti().Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, nil)
}

// TestMultiQueriesSourcesConcurrently uses sources that each wait until
// every source has started: a sequential Multi would never finish.
func TestMultiQueriesSourcesConcurrently(t *testing.T) {
	t.Parallel()
	const n = 3
	started := make(chan struct{}, n)
	allStarted := make(chan struct{})
	go func() {
		for range n {
			<-started
		}
		close(allStarted)
	}()
	sources := make([]Source, n)
	for i := range sources {
		addr := []string{"peer-0.app:7000", "peer-1.app:7000", "peer-2.app:7000"}[i]
		sources[i] = &fakeSource{name: addr, lookup: func(ctx context.Context) ([]string, error) {
			started <- struct{}{}
			select {
			case <-allStarted:
				return []string{addr}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
	}
	got, err := NewMulti(sources...).Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v (sources were not queried concurrently)", err)
	}
	assertAddrs(t, got, []string{"peer-0.app:7000", "peer-1.app:7000", "peer-2.app:7000"})
}

func TestMultiLookupReturnsWhenContextEnds(t *testing.T) {
	t.Parallel()
	blocked := &fakeSource{name: "blocked", lookup: func(ctx context.Context) ([]string, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	m := NewMulti(mustStatic(t, "peer-0.app:7000"), blocked)
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	got, err := m.Lookup(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want one wrapping context.Canceled", err)
	}
	assertAddrs(t, got, nil)
}

func TestMultiWatchFiresWhenPeersFileChanges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "peers")
	f := newTestFile(t, path)
	m := NewMulti(mustStatic(t, "peer-0.app:7000"), f)
	ctx := testContext(t)
	changes := m.Watch(ctx)

	writeFile(t, path, "peer-1.app:7000\n")
	for {
		select {
		case <-changes:
		case <-ctx.Done():
			t.Fatal("Watch did not fire after the peers file changed")
		}
		got, err := m.Lookup(ctx)
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		if len(got) == 2 {
			assertAddrs(t, got, []string{"peer-0.app:7000", "peer-1.app:7000"})
			return
		}
	}
}

func TestMultiNameListsSources(t *testing.T) {
	t.Parallel()
	m := NewMulti(mustStatic(t, "peer-0.app:7000"), NewDNSSRV("_raft._tcp.app"))
	if want := `multi(static [peer-0.app:7000], dns-srv "_raft._tcp.app")`; m.Name() != want {
		t.Errorf("Name() = %q, want %q", m.Name(), want)
	}
}
