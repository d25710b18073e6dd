//go:build unix

package grpcpolicy_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) the process has used,
// every thread included: a measure that other processes' load on the
// machine affects far less than wall time.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
