//go:build !race

package reliability

// raceScale divides the soak's call counts; 1 without the race detector.
const raceScale = 1
