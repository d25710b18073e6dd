//go:build !unix

package grpcpolicy_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
