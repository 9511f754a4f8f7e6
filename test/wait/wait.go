// Package wait is the one way tests wait for a condition: poll it until it
// holds or a deadline passes, and on timeout say what was awaited and what
// was last seen. Tests never sleep to synchronise.
package wait

import (
	"fmt"
	"testing"
	"time"
)

// A condition is checked again after firstInterval, then less and less
// often, up to maxInterval: quick conditions are seen at once, and slow ones
// (a cluster of processes healing) are not polled in a busy loop.
const (
	firstInterval = 5 * time.Millisecond
	maxInterval   = 100 * time.Millisecond
)

// For polls cond until it returns nil or timeout passes. It returns nil, or
// an error naming what and cond's last error. It may be called from any
// goroutine.
func For(timeout time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s; last seen: %v", timeout, what, err)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}

// Until is For that fails the test on timeout. Call it from the test's
// goroutine.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := For(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// True adapts a boolean condition to For and Until.
func True(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("not yet")
	}
}
