// Package e2e holds bagkeeper's process-level end-to-end fault tests.
//
// Each test starts real `bagkeeper run` processes, one per simulated pod,
// on loopback addresses (127.x.y.z, one address per pod, so a pod can move
// to a new address like a rescheduled Kubernetes pod). A pod's data dir is
// a real directory (its volume); the tests kill pods with SIGKILL, stop them
// with SIGTERM, wipe their volumes, move them to new addresses and replace
// them under new names, and after every fault check the design's invariants
// from the outside, through each sidecar's admin socket and /readyz:
//
//   - no committed bag is lost or changed (invariant 1);
//   - no unit is created, released or removed because of a momentary
//     observation (invariant 2);
//   - a member that lost its disk comes back under a new raft id and cannot
//     vote with a memory it no longer has (invariant 3);
//   - there is exactly one cluster: one cluster id, one configuration, one
//     leader (invariant 4).
//
// TestLinearizableBagsUnderFaults also checks, with porcupine, that bag
// reads and writes of concurrent clients are linearizable while a nemesis
// kills, pauses and wipes members (longer with BAGKEEPER_SOAK_DURATION, as
// `make soak` runs it).
//
// BAGKEEPER_E2E_LOG_STORE (boltdb, wal or segments) gives every pod that --log-store,
// so that the suite runs on either raft log store; a test that damages a
// store's files names the store it needs.
//
// The bagkeeper binary is built once per `go test` run (without -race, for
// speed). Tests run one after another: each raft group is timing-sensitive,
// and several groups at once on a small machine miss heartbeats.
package e2e
