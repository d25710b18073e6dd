//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel send SIGTERM to cmd's process if the test
// binary dies first (a crash, or a kill on timeout), so that no Prometheus
// outlives the test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
