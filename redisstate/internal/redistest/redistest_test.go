package redistest_test

import (
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/watertight/watertight/redisstate/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartKillRestart(t *testing.T) {
	s := redistest.Start(t)
	if s.PID() == 0 {
		t.Fatal("no PID after Start")
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	s.Kill()
	if s.PID() != 0 {
		t.Fatal("PID after Kill")
	}
	if c, err := net.Dial("tcp", s.Addr()); err == nil {
		c.Close()
		t.Fatal("server still answering after Kill")
	}
	s.Restart()
	c, err = net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatalf("dial after Restart: %v", err)
	}
	c.Close()
	s.Freeze()
	s.Thaw()
}
