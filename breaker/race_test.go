//go:build race

package breaker

func init() { raceEnabled = true }
