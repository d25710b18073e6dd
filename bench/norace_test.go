//go:build !race

package bench

// raceEnabled says the race detector is on: TestSimAdaptive is skipped.
const raceEnabled = false
