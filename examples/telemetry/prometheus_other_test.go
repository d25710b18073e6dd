//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal; the test still stops Prometheus by its PID when it ends.
func dieWithParent(*exec.Cmd) {}
