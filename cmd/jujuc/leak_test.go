package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests' agents, proxies and peers all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
