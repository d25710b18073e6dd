package redisstate_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/redisstate/internal/redistest"
)

const (
	info4 = "# Server\r\nredis_version:4.0.14\r\n"
	info7 = "# Server\r\nredis_version:7.2.4\r\n"
)

// versionedRedis is a loopback server that plays a Redis whose version
// the test changes mid-life (a restart as another version, a failover to
// an older node). It answers INFO with its info (or, if info starts with
// "-", that error reply); as a Redis 4 (info names a 4.x), every script
// with the error Redis 4 gives a script that writes after TIME; as a
// later Redis, a three-key script (the budget's acquire) with {1, 1, 1, 1}
// (a lease taken, one replica, the count complete, its time), any other script with
// 1, and other commands with 0. HELLO gets an error, so go-redis speaks
// RESP2. If hold is set, the first INFO's answer waits until holdFor INFO
// have come in, or a while (a window in which concurrent callers would
// each send theirs).
type versionedRedis struct {
	ln      net.Listener
	info    atomic.Pointer[string]
	holdFor int
	mu      sync.Mutex
	cmds    map[string]int
	arrived chan struct{} // a token per INFO, when holdFor > 0
	wg      sync.WaitGroup
}

func startVersionedRedis(t *testing.T, info string, holdFor int) *versionedRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &versionedRedis{ln: ln, cmds: map[string]int{}, holdFor: holdFor, arrived: make(chan struct{}, 1024)}
	f.set(info)
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

func (f *versionedRedis) set(info string) { f.info.Store(&info) }

func (f *versionedRedis) addr() string { return f.ln.Addr().String() }

func (f *versionedRedis) got(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cmds[name]
}

func (f *versionedRedis) scripts() int { return f.got("EVALSHA") + f.got("EVAL") }

func (f *versionedRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(args[0])
		f.mu.Lock()
		f.cmds[name]++
		first := name == "INFO" && f.cmds[name] == 1
		f.mu.Unlock()
		info := *f.info.Load()
		old := strings.Contains(info, "redis_version:4.")
		var reply string
		switch name {
		case "PING":
			reply = "+PONG\r\n"
		case "CLIENT":
			reply = "+OK\r\n"
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "INFO":
			if f.holdFor > 0 {
				f.arrived <- struct{}{}
				if first {
					f.hold()
				}
			}
			if strings.HasPrefix(info, "-") {
				reply = info + "\r\n"
			} else {
				reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
			}
		case "EVALSHA", "EVAL":
			switch {
			case old:
				reply = "-ERR Error running script (call to f_0): @user_script:1: @user_script: 1: Write commands not allowed after non deterministic commands. Call redis.replicate_commands() at the start of your script in order to switch to single commands replication mode.\r\n"
			case len(args) > 2 && args[2] == "3":
				reply = "*4\r\n:1\r\n:1\r\n:1\r\n:1\r\n"
			default:
				reply = ":1\r\n"
			}
		default:
			reply = ":0\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// hold waits until holdFor INFO have arrived (the first included), or
// 200 ms: long enough for concurrent callers that each ask to be seen.
func (f *versionedRedis) hold() {
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	for n := 0; n < f.holdFor; n++ {
		select {
		case <-f.arrived:
		case <-t.C:
			return
		}
	}
}

func versionBudget(t *testing.T, addr string, mode redisstate.Fallback) *redisstate.Budget {
	t.Helper()
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{
		Name: t.Name(), Limit: 5, Fallback: mode, Redis: patientRedis(newClient(t, addr)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func callBudget(b *redisstate.Budget) error {
	return b.Execute(context.Background(), func(context.Context) error { return nil })
}

// fakeClock is the version check's clock in a test: it moves only when
// the test moves it.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock(t *testing.T) *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	redisstate.SetVersionClock(t, func() time.Time { return time.Unix(0, c.now.Load()) })
	return c
}

func (c *fakeClock) advance(d time.Duration) { c.now.Add(int64(d)) }

// A Redis 4 upgraded in place (the remedy ErrRedisTooOld asks for) is
// noticed without a restart: "too old" is kept for VersionRecheck (30 s),
// without asking again, then INFO is asked again and the scripts go.
func TestVersionUpgradeNoticed(t *testing.T) {
	clock := newFakeClock(t)
	f := startVersionedRedis(t, info4, 0)
	b := versionBudget(t, f.addr(), redisstate.FailOpen)
	callBudget(b)
	if n, s := f.got("INFO"), f.scripts(); n != 1 || s != 0 {
		t.Fatalf("against Redis 4: %d INFO, %d scripts; want 1, 0", n, s)
	}
	f.set(info7)
	clock.advance(redisstate.VersionRecheck - time.Millisecond)
	callBudget(b)
	if n, s := f.got("INFO"), f.scripts(); n != 1 || s != 0 {
		t.Fatalf("upgraded, %v later: %d INFO, %d scripts; want 1, 0 (the answer kept)", redisstate.VersionRecheck-time.Millisecond, n, s)
	}
	clock.advance(time.Millisecond)
	callBudget(b)
	if n, s := f.got("INFO"), f.scripts(); n != 2 || s == 0 {
		t.Fatalf("upgraded, %v later: %d INFO, %d scripts; want 2, and scripts sent", redisstate.VersionRecheck, n, s)
	}
	callBudget(b)
	if n := f.got("INFO"); n != 2 {
		t.Errorf("%d INFO once the server passed; want 2 (not asked again)", n)
	}
}

// A server still too old when asked again stays on the fallback, and
// otel.Handle is told once per version, not at every recheck.
func TestVersionStillTooOld(t *testing.T) {
	clock := newFakeClock(t)
	h := setErrHandler(t)
	f := startVersionedRedis(t, info4, 0)
	b := versionBudget(t, f.addr(), redisstate.FailClosed)
	for range 3 {
		if err := callBudget(b); !errors.Is(err, redisstate.ErrRedisTooOld) {
			t.Fatalf("Execute: %v, want ErrRedisTooOld", err)
		}
		clock.advance(redisstate.VersionRecheck)
	}
	if n, s := f.got("INFO"), f.scripts(); n != 3 || s != 0 {
		t.Errorf("%d INFO, %d scripts for 3 calls %v apart; want 3, 0", n, s, redisstate.VersionRecheck)
	}
	if errs := h.get(); len(errs) != 1 {
		t.Errorf("otel.Handle got %v; want one error", errs)
	}
}

// A failover to an older node after the server passed: the first script it
// refuses as an old server does puts the version in doubt, INFO is asked
// again, and no more scripts go; a FailClosed budget's calls then fail with
// ErrRedisTooOld.
func TestVersionDowngradeNoticed(t *testing.T) {
	newFakeClock(t) // no recheck by the clock: the script error alone asks again
	f := startVersionedRedis(t, info7, 0)
	b := versionBudget(t, f.addr(), redisstate.FailClosed)
	if err := callBudget(b); err != nil {
		t.Fatalf("against Redis 7: %v", err)
	}
	infos, scripts := f.got("INFO"), f.scripts()
	f.set(info4)
	err := callBudget(b)
	if !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("the first call after the downgrade: %v, want a rejection (its script failed)", err)
	}
	for i := range 3 {
		if err := callBudget(b); !errors.Is(err, redisstate.ErrRedisTooOld) || !strings.Contains(err.Error(), "4.0.14") {
			t.Fatalf("call %d after the downgrade: %v, want ErrRedisTooOld naming 4.0.14", i+2, err)
		}
	}
	if n := f.scripts() - scripts; n != 1 {
		t.Errorf("%d scripts sent after the downgrade; want 1 (the one refused)", n)
	}
	if n := f.got("INFO") - infos; n != 1 {
		t.Errorf("%d INFO after the downgrade; want 1", n)
	}
}

// A FailClosed budget's rejection against a server too old matches
// ErrRedisTooOld and names the version, besides matching what every
// rejection of a Budget matches.
func TestVersionRejectionCause(t *testing.T) {
	f := startVersionedRedis(t, info4, 0)
	b := versionBudget(t, f.addr(), redisstate.FailClosed)
	for i := range 2 { // the call that asks, and one that finds the answer kept
		err := callBudget(b)
		var re *policy.RejectedError
		if !errors.As(err, &re) || re.Reason != redisstate.ReasonRedisUnavailable ||
			!errors.Is(err, bulkhead.ErrFull) || !errors.Is(err, redisstate.ErrRedisTooOld) {
			t.Fatalf("call %d: %v, want a redis_unavailable rejection matching ErrRedisTooOld", i, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "4.0.14") || strings.Count(msg, "redisstate:") != 1 {
			t.Errorf("call %d: message %q; want the version, and one package prefix", i, msg)
		}
	}
}

// 32 concurrent first calls share one INFO round trip (the first one's
// answer is held until the others could have sent theirs).
func TestVersionSingleFlight(t *testing.T) {
	const n = 32
	f := startVersionedRedis(t, info7, n)
	// A read timeout well past the held answer's 200 ms (NewClient's
	// default is 100 ms).
	c := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{f.addr()}, ReadTimeout: patience})
	defer c.Close()
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{
		Name: t.Name(), Limit: n, Fallback: redisstate.FailOpen, Redis: patientRedis(c),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() { <-start; callBudget(b) })
	}
	close(start)
	wg.Wait()
	if got := f.got("INFO"); got != 1 {
		t.Errorf("%d concurrent first calls sent %d INFO; want 1", n, got)
	}
	if s := f.scripts(); s < n {
		t.Errorf("%d scripts for %d calls", s, n)
	}
}

// Which error replies to INFO refuse it for good (the server cannot be
// told: CheckVersion nil, and a policy sends its scripts) and which pass
// (an error: the version is not known yet, no script goes, and the next
// round trip asks again).
func TestVersionErrorReplies(t *testing.T) {
	for _, tc := range []struct {
		reply   string
		refusal bool
	}{
		{"-ERR unknown command 'INFO', with args beginning with: 'server' ", true},
		{"-ERR unknown command `INFO`, with args beginning with: `server`, ", true},
		{"-NOPERM this user has no permissions to run the 'info' command", true},
		{"-NOPERM User app has no permissions to run the 'info' command", true},
		{"-ERR unsupported command 'info'", true},
		{"-unsupported command 'info'", true}, // Envoy's Redis proxy
		{"-ERR max number of clients reached", false},
		{"-LOADING Redis is loading the dataset in memory", false},
		{"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.", false},
		{"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", false},
		{"-ERR something else went wrong", false},
	} {
		t.Run(strings.Fields(tc.reply)[0][1:], func(t *testing.T) {
			f := startVersionedRedis(t, tc.reply, 0)
			err := redisstate.CheckVersion(t.Context(), newClient(t, f.addr()))
			if tc.refusal != (err == nil) {
				t.Errorf("%q: CheckVersion %v; want a refusal %v", tc.reply, err, tc.refusal)
			}
			b := versionBudget(t, f.addr(), redisstate.FailOpen)
			callBudget(b)
			infos := f.got("INFO")
			if s := f.scripts(); tc.refusal != (s > 0) {
				t.Errorf("%q: %d scripts; want scripts %v", tc.reply, s, tc.refusal)
			}
			if tc.refusal {
				return
			}
			f.set(info4) // the passing state ends: a Redis 4 behind it
			callBudget(b)
			callBudget(b)
			if n, s := f.got("INFO")-infos, f.scripts(); n != 1 || s != 0 {
				t.Errorf("%q then a Redis 4: %d more INFO, %d scripts; want 1, 0", tc.reply, n, s)
			}
		})
	}
}

// A real redis-server at its maxclients answers a new connection "ERR max
// number of clients reached" and closes it: CheckVersion returns an error
// the caller may retry (that reply, or the broken connection, depending on
// which go-redis sees first), not nil ("cannot be told").
func TestCheckVersionMaxClients(t *testing.T) {
	srv := redistest.Start(t, "--maxclients", "1")
	hog := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer hog.Close()
	if err := hog.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	err := redisstate.CheckVersion(t.Context(), newClient(t, srv.Addr()))
	if err == nil {
		t.Error("CheckVersion at maxclients: nil; want an error")
	}
}

// CheckVersion's error for a nil client names its argument, not a Config
// field.
func TestCheckVersionNilClient(t *testing.T) {
	for _, c := range []redis.UniversalClient{nil, (*redis.Client)(nil)} {
		err := redisstate.CheckVersion(t.Context(), c)
		if err == nil || strings.Contains(err.Error(), "Config") || !strings.Contains(err.Error(), "CheckVersion's client must be set") {
			t.Errorf("CheckVersion(%#v): %v", c, err)
		}
	}
}

// errs collects what otel.Handle is given, for one test.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (h *errs) Handle(err error) {
	h.mu.Lock()
	h.list = append(h.list, err)
	h.mu.Unlock()
}

// setErrHandler makes otel.Handle collect its errors until t ends.
func setErrHandler(t *testing.T) *errs {
	h := &errs{}
	otel.SetErrorHandler(h)
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	return h
}

func (h *errs) get() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.list...)
}
