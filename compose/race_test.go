//go:build race

package compose_test

func init() { raceEnabled = true }
