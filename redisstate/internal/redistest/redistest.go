// Package redistest starts real redis-server processes for the tests of
// package redisstate: each on a free loopback port, without persistence,
// stopped by its PID. A test that needs one and finds no redis-server on
// PATH is skipped with a message saying how to install it.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process started by [Start]. Its methods are
// safe for concurrent use; the test's cleanup stops it.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
	frozen bool
}

// Binary returns the path of redis-server, or skips t if there is none
// (fails it if WATERTIGHT_REQUIRE_REDIS=1, as .ci/run sets).
func Binary(t testing.TB) string {
	t.Helper()
	return lookPath(t, "redis-server", "redis-server")
}

// lookPath returns the path of the command name, from Debian package pkg,
// or skips t (fails it under WATERTIGHT_REQUIRE_REDIS=1) if there is none.
func lookPath(t testing.TB, name, pkg string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		msg := "redistest: " + name + " not found on PATH; install it (Debian: apt-get install -y " + pkg + ") to run the tests against a real Redis"
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal(msg + " (WATERTIGHT_REQUIRE_REDIS=1)")
		}
		t.Skip(msg)
	}
	return bin
}

// Start starts a redis-server on a free loopback port, with persistence
// off, and stops it (by PID) when the test ends. extra are further
// command-line arguments. It skips t if redis-server is not installed
// (see [Binary]).
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: extra}
	var err error
	for range 5 { // a port found free may be taken before the server binds it
		s.port = FreePort(t)
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// PID returns the server process's PID, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	// Generous: a loaded machine can take seconds to start a process.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ping(s.Addr()) == nil {
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited: %s", strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING within 30s", s.port)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done, s.frozen = cmd, done, false
	s.mu.Unlock()
	return nil
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
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Kill stops the server with SIGKILL (a crash: nothing is saved, and there
// is no persistence anyway) and waits for it to exit. It does nothing if
// the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done, frozen := s.cmd, s.done, s.frozen
	s.cmd, s.frozen = nil, false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	if frozen {
		cmd.Process.Signal(syscall.SIGCONT)
	}
	<-done
}

// Restart starts the server again on the same port, empty, after [Kill].
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for range 50 { // the port may linger briefly after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restarting redis-server on port %d: %v", s.port, err)
}

// Freeze stops the server with SIGSTOP: connections stay open and nothing
// answers, the hang a dead host gives (unlike a refused connection).
func (s *Server) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.frozen {
		s.cmd.Process.Signal(syscall.SIGSTOP)
		s.frozen = true
	}
}

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.frozen {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.frozen = false
	}
}
