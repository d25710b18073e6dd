//go:build race

package grpcpolicy_test

// raceEnabled: under the race detector sync.Pool drops items at random,
// so the client's pooled calls allocate now and then.
const raceEnabled = true
