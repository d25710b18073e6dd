package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// replicas is the number of replica processes in each arm.
const replicas = 3

// patience bounds a replica's start and its answer after its run: a
// loaded machine can take seconds to start a process.
const patience = 60 * time.Second

// replica is a replica process that [startReplica] started.
type replica struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // its stdout, line by line; closed at its end
	done  chan struct{} // closed once cmd has been waited for
}

// startReplica starts the program self as a replica, with env added.
func startReplica(ctx context.Context, self string, env []string) (*replica, error) {
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{cmd: cmd, stdin: stdin, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
		cmd.Wait() // once stdout is read to its end, as StdoutPipe asks
	}()
	return r, nil
}

// expect waits up to timeout for the replica's next line, checks that it
// starts with word, and returns the rest.
func (r *replica) expect(word string, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-r.lines:
		rest, found := strings.CutPrefix(l, word)
		switch {
		case !ok:
			return "", fmt.Errorf("replica %d exited, want %q", r.cmd.Process.Pid, word)
		case !found:
			return "", fmt.Errorf("replica %d said %q, want %q", r.cmd.Process.Pid, l, word)
		}
		return strings.TrimSpace(rest), nil
	case <-time.After(timeout):
		return "", fmt.Errorf("replica %d silent for %v, want %q", r.cmd.Process.Pid, timeout, word)
	}
}

// stop kills the replica by its PID if it still runs, and waits for it.
func (r *replica) stop() {
	r.cmd.Process.Kill()
	r.stdin.Close()
	for range r.lines { // let the reader reach the end and wait
	}
	<-r.done
}

// runArm runs one arm: a fresh provider, and the replicas calling it for
// d, each alone or sharing the quota in Redis at redisAddr.
func runArm(ctx context.Context, self, arm, redisAddr string, d time.Duration) (armResult, error) {
	p, err := startProvider()
	if err != nil {
		return armResult{}, err
	}
	defer p.close()
	env := []string{roleEnv + "=replica", armEnv + "=" + arm, redisEnv + "=" + redisAddr,
		providerEnv + "=" + p.url, durationEnv + "=" + d.String(), quotaEnv + "=fleetquota-" + arm}
	var rs []*replica
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	for range replicas {
		r, err := startReplica(ctx, self, env)
		if err != nil {
			return armResult{}, err
		}
		rs = append(rs, r)
	}
	total, err := drive(rs, p, d)
	if err != nil {
		return armResult{}, err
	}
	return newArmResult(arm, p.result(), total), nil
}

// drive waits until every replica is ready, starts the provider's clock
// and every replica at once, and adds up what they saw.
func drive(rs []*replica, p *provider, d time.Duration) (counts, error) {
	var total counts
	for _, r := range rs {
		if _, err := r.expect("ready", patience); err != nil {
			return total, err
		}
	}
	p.begin()
	for _, r := range rs {
		if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
			return total, err
		}
	}
	for _, r := range rs {
		line, err := r.expect("done", d+callTimeout+patience)
		if err != nil {
			return total, err
		}
		var n counts
		if err := json.Unmarshal([]byte(line), &n); err != nil {
			return total, errors.Join(fmt.Errorf("replica %d: %q", r.cmd.Process.Pid, line), err)
		}
		total.Served, total.Throttled = total.Served+n.Served, total.Throttled+n.Throttled
		total.Rejected, total.Failed = total.Rejected+n.Rejected, total.Failed+n.Failed
	}
	return total, nil
}
