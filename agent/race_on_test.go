//go:build race

package agent

// raceDetector reports whether the tests run with the race detector.
const raceDetector = true
