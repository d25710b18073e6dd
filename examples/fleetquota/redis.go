package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// errNoRedis is run's error when redis-server is not on PATH.
var errNoRedis = errors.New("redis-server not found on PATH: install redis-server (Debian: apt-get install redis-server)")

// redisServer is a redis-server process that [startRedis] started.
type redisServer struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
	dir  string
	addr string
}

// startRedis starts redis-server (the binary bin) on a free loopback
// port, without persistence, and waits until it answers PING. A port found
// free may be taken before the server binds it, so it tries five.
func startRedis(ctx context.Context, bin string) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "fleetquota-redis-")
	if err != nil {
		return nil, err
	}
	for range 5 {
		var r *redisServer
		if r, err = tryRedis(ctx, bin, dir); err == nil {
			return r, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("starting redis-server: %w", err)
}

// tryRedis starts redis-server on one free port and waits for its PING.
func tryRedis(ctx context.Context, bin, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logfile := filepath.Join(dir, "redis.log")
	cmd := exec.CommandContext(ctx, bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--loglevel", "warning", "--logfile", logfile)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &redisServer{cmd: cmd, done: make(chan struct{}), dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	go func() { cmd.Wait(); close(r.done) }()
	// Generous: a loaded machine can take seconds to start a process.
	deadline := time.Now().Add(30 * time.Second)
	for ping(r.addr) != nil {
		select {
		case <-r.done:
			log, _ := os.ReadFile(logfile)
			return nil, fmt.Errorf("redis-server exited: %s", strings.TrimSpace(string(log)))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 30s", r.addr)
		}
	}
	return r, nil
}

// kill stops the server by its PID and waits for it to exit.
func (r *redisServer) kill() {
	r.cmd.Process.Kill()
	<-r.done
}

// stop kills the server and removes its directory.
func (r *redisServer) stop() {
	r.kill()
	os.RemoveAll(r.dir)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends PING on a fresh connection and waits for +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
