//go:build !race

package grpcpolicy_test

const raceEnabled = false
