package redisstate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

func TestVersionErr(t *testing.T) {
	for v, tooOld := range map[string]bool{
		"4.0.14": true, "3.2.12": true, "2.8": true,
		"5.0.0": false, "7.0.15": false, "255.255.255": false,
		"": false, "unstable": false, // undetectable: not refused
	} {
		err := redisstate.VersionErr(v)
		if (err != nil) != tooOld {
			t.Errorf("%q: %v, want too old %v", v, err, tooOld)
			continue
		}
		if tooOld && (!errors.Is(err, redisstate.ErrRedisTooOld) || !strings.Contains(err.Error(), "version "+v+":") ||
			!strings.HasPrefix(err.Error(), "redisstate: ")) {
			t.Errorf("%q: %q does not match ErrRedisTooOld or name the version", v, err)
		}
	}
}

// The real redis-server passes (this machine's is 7.0; the package needs 5).
func TestCheckVersionRealServer(t *testing.T) {
	srv := startRedis(t)
	c := newClient(t, srv.Addr())
	if err := redisstate.CheckVersion(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	info, _ := c.Info(t.Context(), "server").Result()
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "redis_version:") {
			t.Logf("%s", strings.TrimSpace(line))
		}
	}
	// Nothing there: the round trip's own error, not a verdict.
	srv.Kill()
	if err := redisstate.CheckVersion(t.Context(), c); err == nil || errors.Is(err, redisstate.ErrRedisTooOld) {
		t.Fatalf("server gone: %v, want the round trip's error", err)
	}
}

// fakeRedis is a loopback server that speaks just enough RESP2 for
// go-redis to connect and ask INFO: it answers INFO with info (an
// unknown-command error if info is empty, info itself if it is an error
// reply, "-..."), PING and CLIENT with OK, and anything else
// (HELLO included, so go-redis falls back to RESP2) with an error, and
// records the commands it got.
type fakeRedis struct {
	ln   net.Listener
	info string
	mu   sync.Mutex
	cmds []string
	wg   sync.WaitGroup
}

func startFakeRedis(t *testing.T, info string) *fakeRedis {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{ln: ln, info: info}
	var conns sync.Map
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			f.wg.Go(func() { f.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		f.wg.Wait()
	})
	return f
}

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		f.mu.Lock()
		f.cmds = append(f.cmds, name)
		f.mu.Unlock()
		var reply string
		switch name {
		case "PING":
			reply = "+PONG\r\n"
		case "CLIENT":
			reply = "+OK\r\n"
		case "INFO":
			switch {
			case f.info == "":
				reply = "-ERR unknown command 'INFO'\r\n"
			case strings.HasPrefix(f.info, "-"):
				reply = f.info + "\r\n" // an error reply of the test's
			default:
				reply = "$" + strconv.Itoa(len(f.info)) + "\r\n" + f.info + "\r\n"
			}
		default:
			reply = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		hdr, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(hdr, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk: %q", hdr)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func (f *fakeRedis) got(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.cmds {
		if c == name {
			n++
		}
	}
	return n
}

// errHandler collects what otel.Handle is given.
type errHandler struct {
	mu   sync.Mutex
	errs []error
}

func (h *errHandler) Handle(err error) {
	h.mu.Lock()
	h.errs = append(h.errs, err)
	h.mu.Unlock()
}

// A Redis 4 is told apart at the policy's first round trip: no script is
// sent to it, ever; the budget runs on its fallback (here FailClosed:
// rejected, reason redis_unavailable); otel.Handle gets one error naming
// the version; CheckVersion says the same at start-up. (patientRedis
// throughout: a round trip timed out on a loaded machine would change
// the counts of round trips checked.)
func TestRedisTooOld(t *testing.T) {
	f := startFakeRedis(t, "# Server\r\nredis_version:4.0.14\r\nredis_mode:standalone\r\n")
	c := newClient(t, f.ln.Addr().String())

	err := redisstate.CheckVersion(t.Context(), c)
	if !errors.Is(err, redisstate.ErrRedisTooOld) || !strings.Contains(err.Error(), "4.0.14") {
		t.Fatalf("CheckVersion: %v, want ErrRedisTooOld naming 4.0.14", err)
	}

	h := &errHandler{}
	otel.SetErrorHandler(h)
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{
		Name: "old", Limit: 5, Fallback: redisstate.FailClosed,
		Redis: patientRedis(c),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	infos := f.got("INFO")
	for range 5 {
		err := b.Execute(context.Background(), func(context.Context) error { t.Error("fn ran"); return nil })
		var re *policy.RejectedError
		if !errors.As(err, &re) || re.Reason != redisstate.ReasonRedisUnavailable || !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("Execute: %v, want a redis_unavailable rejection", err)
		}
	}
	if n := f.got("INFO") - infos; n != 1 {
		t.Errorf("%d INFO round trips for 5 calls; want 1 (the verdict is kept)", n)
	}
	if n := f.got("EVALSHA") + f.got("EVAL"); n != 0 {
		t.Errorf("%d scripts sent to a Redis 4", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) != 1 || !errors.Is(h.errs[0], redisstate.ErrRedisTooOld) || !strings.Contains(h.errs[0].Error(), "4.0.14") {
		t.Errorf("otel.Handle got %v; want one error naming 4.0.14", h.errs)
	}
}

// A server (or proxy) that refuses INFO cannot be told: CheckVersion says
// nothing, and the policy goes on to send its scripts.
func TestRedisVersionUndetectable(t *testing.T) {
	f := startFakeRedis(t, "")
	c := newClient(t, f.ln.Addr().String())
	if err := redisstate.CheckVersion(t.Context(), c); err != nil {
		t.Fatalf("CheckVersion: %v, want nil (undetectable)", err)
	}
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: "proxy", Limit: 5, Fallback: redisstate.FailOpen, Redis: patientRedis(c)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.Execute(ctx, func(context.Context) error { return nil })
	if f.got("EVALSHA")+f.got("EVAL") == 0 {
		t.Error("no script sent: an undetectable version must not block the policy")
	}
}

// A passing error reply (LOADING: Redis loading its dataset after a
// restart) is no verdict: CheckVersion returns it, and a policy asks
// again at its next round trip, instead of letting the server through
// unchecked for good. Real Redis serves INFO while loading; LOADING here
// stands for an error reply a proxy may relay from a loading node
// (TestVersionErrorReplies covers the other transient replies).
func TestRedisVersionLoading(t *testing.T) {
	f := startFakeRedis(t, "-LOADING Redis is loading the dataset in memory")
	c := newClient(t, f.ln.Addr().String())
	err := redisstate.CheckVersion(t.Context(), c)
	if err == nil || errors.Is(err, redisstate.ErrRedisTooOld) || !strings.Contains(err.Error(), "LOADING") {
		t.Fatalf("CheckVersion: %v, want the LOADING error", err)
	}
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: "loading", Limit: 5, Fallback: redisstate.FailOpen, Redis: patientRedis(c)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for range 2 {
		b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	if n := f.got("INFO"); n != 3 {
		t.Errorf("%d INFO in all; want 3 (CheckVersion, then each call asks again)", n)
	}
	if n := f.got("EVALSHA") + f.got("EVAL"); n != 0 {
		t.Errorf("%d scripts sent before the version was known", n)
	}
}
