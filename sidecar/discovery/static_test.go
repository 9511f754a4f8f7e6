package discovery

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestStaticReturnsSortedCanonicalUniqueAddresses(t *testing.T) {
	t.Parallel()
	s, err := NewStatic([]string{"peer-1.app:7000", " Peer-0.app:7000", "", "  ", "[fd00::1]:7000", "peer-1.app:7000", "10.0.0.1:7000"})
	if err != nil {
		t.Fatalf("NewStatic: %v", err)
	}
	got, err := s.Lookup(testContext(t))
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	assertAddrs(t, got, []string{"10.0.0.1:7000", "[fd00::1]:7000", "peer-0.app:7000", "peer-1.app:7000"})
	if want := "static [10.0.0.1:7000 [fd00::1]:7000 peer-0.app:7000 peer-1.app:7000]"; s.Name() != want {
		t.Errorf("Name() = %q, want %q", s.Name(), want)
	}
}

func TestStaticLookupReturnsACopy(t *testing.T) {
	t.Parallel()
	s, err := NewStatic([]string{"peer-0.app:7000"})
	if err != nil {
		t.Fatalf("NewStatic: %v", err)
	}
	got, _ := s.Lookup(testContext(t))
	got[0] = "mutated:1"
	again, _ := s.Lookup(testContext(t))
	assertAddrs(t, again, []string{"peer-0.app:7000"})
}

func TestStaticEmptyListAnswersNothing(t *testing.T) {
	t.Parallel()
	for _, in := range [][]string{nil, {}, {"", " "}} {
		s, err := NewStatic(in)
		if err != nil {
			t.Fatalf("NewStatic(%q): %v", in, err)
		}
		got, err := s.Lookup(testContext(t))
		if err != nil {
			t.Fatalf("Lookup: %v", err)
		}
		assertAddrs(t, got, nil)
	}
}

func TestStaticRejectsInvalidEntriesNamingEachOne(t *testing.T) {
	t.Parallel()
	s, err := NewStatic([]string{"peer-0.app:7000", "peer-1.app", "fd00::1:7000", "peer-3.app:0"})
	if err == nil {
		t.Fatalf("NewStatic returned %v, want an error", s)
	}
	if !errors.Is(err, ErrInvalidAddress) {
		t.Errorf("error %v does not wrap ErrInvalidAddress", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`entry 2: invalid peer address "peer-1.app": missing port`,
		`entry 3: invalid peer address "fd00::1:7000": an IPv6 address must be in brackets followed by :port`,
		`entry 4: invalid peer address "peer-3.app:0": port 0 out of range 1-65535`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "entry 1") {
		t.Errorf("error %q blames the valid entry 1", msg)
	}
}

func TestStaticLookupFailsOnEndedContext(t *testing.T) {
	t.Parallel()
	s, err := NewStatic([]string{"peer-0.app:7000"})
	if err != nil {
		t.Fatalf("NewStatic: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Lookup(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup on a cancelled context: error %v, want context.Canceled", err)
	}
}
