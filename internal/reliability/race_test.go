//go:build race

package reliability

// raceScale divides the soak's call counts under the race detector, which
// slows every call ten- to twentyfold: the -short soak (100 000 calls)
// becomes 25 000, to stay well under a minute on 2 cores.
const raceScale = 4
