// Command loginstorm is the seed post's demo in Go: one slow dependency
// starves a login route that never calls it, and a watertight bulkhead per
// dependency stops it.
//
// Three pieces, as in the seed:
//
//   - upstream: a fake LLM provider that answers every request after -delay
//     (30 s by default).
//   - app: /login, which does no work, and /chat, which calls the upstream.
//     Every request first takes one of 50 server slots (a watertight
//     bulkhead with an unbounded queue and no patience, standing in for a
//     platform's per-instance concurrency cap). In shared mode /chat calls
//     the upstream through one client with no connection limit, like Node's
//     global agent. In bulkhead mode it calls it through an
//     httppolicy.Transport with a bulkhead of 10 in flight, 20 waiting and
//     1 s of patience, over a transport capped at 10 connections; a chat
//     turned away is answered 503 with Retry-After at once and frees its
//     server slot.
//   - load: 80 chats at once, then 1 s later 50 logins at once (-rounds
//     repeats the login wave, 1 s apart, and pools the samples), reporting
//     login p50, p99 and max (nearest rank), the chats' answers and the
//     wall time.
//
// In priority mode the server slots are the only limit: /login is
// critical and /chat sheddable, 20 of the 50 slots are kept for critical
// requests, and 50 requests may wait for 0.5 s. So 30 chats run, the other
// 50 are answered 503 with Retry-After within half a second, and the logins
// walk into the reserved slots. The patience is shorter than the second
// before the logins, so that the chats' 503s are not written during the
// login wave.
//
// In shared mode 50 chats take every slot for one upstream delay, the other
// 30 queue, and the logins queue behind them: login p99 is about one delay.
// In bulkhead mode at most 30 chats hold a slot after the first
// milliseconds (10 running, 20 waiting for at most 1 s), so the logins walk
// in: login p99 is about a millisecond, and the chats read 10 x 200 and
// 70 x 503.
//
// In breaker mode /chat calls the upstream as in bulkhead mode, with a
// breaker under the bulkhead whose slow rule opens it once the first chats
// have run 5 s (-slow) without an answer. Every chat comes at once in the
// storm, before any is slow, so the command then sends the 80 chats spread
// over two delays to bulkhead and breaker mode side by side: with the
// breaker, fewer chats hold a slot for the whole delay, and the 503s come
// at once instead of after the bulkhead's 1 s of patience.
//
// In route mode /chat has two equivalent upstreams, the slow one and a
// healthy one answering in a fifteenth of -delay, and routes each chat to
// one of them (package route, through watertight.NewHTTPClient's
// endpoints): at most 10 in flight to the slow one, 40 to the healthy one,
// no queue. Light traffic for eight healthy delays before the storm shows
// the router which one is slow: it is ejected, and the storm's chats all go
// to the healthy one; those it has no room for are answered 503 at once.
//
// In tenants mode (all-in-one only) each chat is for a tenant, named in
// its Loginstorm-Tenant header: a noisy tenant sends 60 chats at once and
// 30 more over a quarter of the delay, a quiet one 3 over the same time,
// through bulkhead mode's chats' compartment. It runs without the fair
// share (first come first served: the noisy tenant holds every slot and
// the quiet one gets 503s) and with it (FairShare, and at most 7 slots per
// tenant: the quiet tenant's chats all run), side by side.
//
// Usage:
//
//	go run ./examples/loginstorm [-delay 30s] [-chats 80] [-logins 50] [-rounds 1] [-mode all] [-json]
//
// runs everything in one process on ephemeral ports, each mode in turn with
// a fresh upstream and app, printing progress to stderr and the report to
// stdout. The pieces also run on their own, as in the seed's three
// terminals:
//
//	go run ./examples/loginstorm upstream [-addr 127.0.0.1:4001] [-delay 30s]
//	MODE=bulkhead go run ./examples/loginstorm app [-addr 127.0.0.1:3000] [-upstream http://127.0.0.1:4001]
//	go run ./examples/loginstorm load [-target http://127.0.0.1:3000] [-chats 80] [-logins 50] [-rounds 1] [-json]
//
// The DELAY environment variable (a duration, or milliseconds as the seed's
// DELAY_MS) sets the default of -delay.
//
// # What makes a login slow in bulkhead mode
//
// With the bulkhead, a login never waits for a chat; what is left is the
// cost of the wave itself: 50 requests on 50 new connections at once, client
// and server in one process on two cores, while the 20 chats that waited
// 1 s are answered 503: a few milliseconds of CPU, so a few milliseconds
// of wall time (the README gives the measured figures). The one thing found to double or triple it was
// a garbage collection landing in the wave: the heap starts at the
// runtime's 4 MB minimum goal, the 80 chats' connections fill most of it,
// and the logins tip it over, so the first collection of the process lands
// in the wave nearly every time. On two cores its mark phase takes one of
// the two Ps for its whole length, and its stop-the-world pauses stretch on
// a busy machine. So this command runs with GOGC=400 (a 16 MB minimum goal,
// which the default load does not reach; a real service's heap dwarfs a
// 50-login wave anyway) unless the GOGC environment variable is set:
// GOGC=100 gives the runtime's default. Each mode of the all-in-one run
// starts after a collection, so the order of the modes does not matter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// waveGap is the time from the chats to the first login wave, and between
// waves.
const waveGap = time.Second

// gcPercent is the GOGC this command runs with unless the GOGC environment
// variable says otherwise; see the package documentation.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the usage is printed; asking for it is no failure
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run is the command: args without the program name; the report goes to
// stdout, progress and logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "help":
			args = []string{"-h"}
		case "upstream":
			return runUpstream(ctx, args[1:], stderr)
		case "app":
			return runApp(ctx, args[1:], stderr)
		case "load":
			return runLoadCmd(ctx, args[1:], stdout, stderr)
		}
	}
	return runAll(ctx, args, stdout, stderr)
}

// loadFlags are the flags the all-in-one command and load share.
type loadFlags struct {
	delay                 time.Duration
	chats, logins, rounds int
	json                  bool
}

func (f *loadFlags) register(fs *flag.FlagSet, defDelay time.Duration) {
	fs.DurationVar(&f.delay, "delay", defDelay, delayUsage)
	fs.IntVar(&f.chats, "chats", 80, "chats sent at once")
	fs.IntVar(&f.logins, "logins", 50, "logins per wave, the first 1s after the chats")
	fs.IntVar(&f.rounds, "rounds", 1, "login waves, 1s apart, pooled into one set of samples")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the table")
}

func (f *loadFlags) validate() error {
	switch {
	case f.delay < 0:
		return fmt.Errorf("loginstorm: -delay must be >= 0, got %v", f.delay)
	case f.chats < 0:
		return fmt.Errorf("loginstorm: -chats must be >= 0, got %d", f.chats)
	case f.logins < 1:
		return fmt.Errorf("loginstorm: -logins must be >= 1, got %d", f.logins)
	case f.rounds < 1:
		return fmt.Errorf("loginstorm: -rounds must be >= 1, got %d", f.rounds)
	}
	return nil
}

func (f *loadFlags) params() params {
	return params{Delay: f.delay, Chats: f.chats, Logins: f.logins, Rounds: f.rounds}
}

// clientTimeout is the load client's timeout: well above the slowest chat
// (about two delays in shared mode, queued behind the first wave).
func (f *loadFlags) clientTimeout() time.Duration { return 4*f.delay + 30*time.Second }

// delayUsage is the usage of every -delay flag; the flag package appends
// the default, which $DELAY has already set.
const delayUsage = "how long the upstream takes to answer, taken from $DELAY if set (a duration, or milliseconds as the seed's DELAY_MS)"

// usage is the all-in-one command's usage: its subcommands, then (printed
// by newFlagSet's Usage) its flags.
const usage = `Usage:
  loginstorm [flags]             run upstream, app and load in this process, for each -mode in turn
  loginstorm upstream [flags]    serve the slow upstream (a fake LLM provider)
  loginstorm app [flags]         serve /login and /chat, in shared, bulkhead, priority, breaker or route mode
  loginstorm load [flags]        send the chats and logins to an app started elsewhere
  loginstorm help                print this

Run "loginstorm <subcommand> -h" for a subcommand's flags.
`

// newFlagSet returns a flag set named name whose usage goes to stderr:
// head, then the flags with their defaults.
func newFlagSet(name, head string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, head)
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// runAll runs upstream, app and load in this process for each mode.
func runAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	defDelay, err := delayFromEnv(30 * time.Second)
	if err != nil {
		return err
	}
	var f loadFlags
	var mode string
	fs := newFlagSet("loginstorm", usage, stderr)
	f.register(fs, defDelay)
	fs.StringVar(&mode, "mode", "all", "shared, bulkhead, priority, breaker (bulkhead and breaker with the chats spread), route, tenants (a noisy and a quiet tenant, without and with the fair share), or all")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("loginstorm: unknown subcommand %q (want upstream, app or load)", fs.Arg(0))
	}
	if err := f.validate(); err != nil {
		return err
	}
	modes, spread, tenants, err := selectModes(mode)
	if err != nil {
		return err
	}
	rows, err := runModes(ctx, modes, f, 0, stderr)
	if err != nil {
		return err
	}
	spreadRows, err := runSpread(ctx, spread, f, stderr)
	if err != nil {
		return err
	}
	var arms []tenantArm
	if tenants {
		runtime.GC() // as before each mode
		if arms, err = runTenants(ctx, f, stderr); err != nil {
			return err
		}
	}
	if f.json {
		return writeJSON(stdout, f.params(), rows, spreadRows, arms)
	}
	if err := writeTable(stdout, f.params(), rows, spreadRows); err != nil || len(arms) == 0 {
		return err
	}
	if len(rows)+len(spreadRows) > 0 {
		fmt.Fprintln(stdout)
	}
	return writeTenants(stdout, f.delay, arms)
}

// selectModes returns what -mode runs: the login storm's modes, the slow
// provider's (the chats spread), and whether tenants mode runs.
func selectModes(mode string) (modes, spread []string, tenants bool, err error) {
	switch mode {
	case "all":
		return []string{modeShared, modeBulkhead, modePriority, modeRoute}, []string{modeBulkhead, modeBreaker}, true, nil
	case modeShared, modeBulkhead, modePriority, modeRoute:
		return []string{mode}, nil, false, nil
	case modeBreaker:
		return nil, []string{modeBulkhead, modeBreaker}, false, nil
	case modeTenants:
		return nil, nil, true, nil
	}
	return nil, nil, false, fmt.Errorf("loginstorm: -mode must be shared, bulkhead, priority, breaker, route, tenants or all, got %q", mode)
}

// runModes runs each mode in turn, the chats spread over spread.
func runModes(ctx context.Context, modes []string, f loadFlags, spread time.Duration, stderr io.Writer) ([]summary, error) {
	rows := make([]summary, 0, len(modes))
	for _, m := range modes {
		// Each mode starts from a collected heap, as testing.B does before
		// each benchmark, so that garbage left by the one before does not
		// decide when the next collection lands.
		runtime.GC()
		r, err := runMode(ctx, m, f, spread, stderr)
		if err != nil {
			return nil, err
		}
		rows = append(rows, summary{Mode: m, loadResult: r})
	}
	return rows, nil
}

// runSpread runs each mode with the chats spread over two delays, so that
// most come after the first ones have turned slow, all modes at once, each
// with its own upstream, app and load.
func runSpread(ctx context.Context, modes []string, f loadFlags, stderr io.Writer) ([]summary, error) {
	rows := make([]summary, len(modes))
	errs := make([]error, len(modes))
	stderr = &syncWriter{w: stderr} // the loads' progress lines
	var wg sync.WaitGroup
	for i, m := range modes {
		wg.Go(func() {
			var r loadResult
			r, errs[i] = runMode(ctx, m, f, 2*f.delay, stderr)
			rows[i] = summary{Mode: m, loadResult: r}
		})
	}
	wg.Wait()
	return rows, errors.Join(errs...)
}

// syncWriter serializes the writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// slowFor is the breaker mode's slow-call duration for an upstream delay:
// a sixth of it (5 s for the seed's 30 s), at least 1 ms.
func slowFor(delay time.Duration) time.Duration { return max(delay/6, time.Millisecond) }

// runMode starts a fresh upstream and app in mode on ephemeral ports, runs
// the load against them, and shuts everything down.
func runMode(ctx context.Context, mode string, f loadFlags, spread time.Duration, stderr io.Writer) (loadResult, error) {
	var calls [2]atomic.Int64 // the slow upstream's, the healthy one's
	var healthyPeak atomic.Int64
	up, err := listen("127.0.0.1:0", counted(&calls[0], upstreamHandler(f.delay)))
	if err != nil {
		return loadResult{}, err
	}
	defer up.Close()
	ups := upstreams{slow: up.URL()}
	var warmup time.Duration
	if mode == modeRoute {
		healthy, err := listen("127.0.0.1:0", counted(&calls[1], peaked(&healthyPeak, upstreamHandler(f.delay/healthyShare))))
		if err != nil {
			return loadResult{}, err
		}
		defer healthy.Close()
		ups.healthy, warmup = healthy.URL(), warmupFor(f.delay)
	}
	a, err := newApp(mode, ups, slowFor(f.delay))
	if err != nil {
		return loadResult{}, err
	}
	label := mode
	if spread > 0 {
		label += "/spread"
	}
	defer a.Close() // after the app's server is closed: deferred calls run last first
	srv, err := listen("127.0.0.1:0", a.handler)
	if err != nil {
		return loadResult{}, err
	}
	defer srv.Close()

	r, err := runLoad(ctx, loadConfig{
		Target:   srv.URL(),
		Chats:    f.chats,
		Spread:   spread,
		Logins:   f.logins,
		Rounds:   f.rounds,
		Gap:      waveGap,
		Warmup:   warmup,
		Timeout:  f.clientTimeout(),
		Label:    label,
		Progress: stderr,
	})
	if mode == modeRoute {
		r.UpstreamCalls = map[string]int{"slow": int(calls[0].Load()), "healthy": int(calls[1].Load())}
		r.HealthyPeak = int(healthyPeak.Load())
	}
	return r, err
}

// warmupFor is route mode's warm-up for an upstream delay: eight healthy
// delays (16 s for the seed's 30 s), long enough for the slow upstream's
// first chats to run four healthy delays without an answer, which ejects
// it, and for a warm-up chat to take its first probe, with room to spare
// on a busy machine.
func warmupFor(delay time.Duration) time.Duration { return 8 * delay / healthyShare }

// counted counts the requests h serves in n.
func counted(n *atomic.Int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

// peaked returns h, recording in peak the most requests it served at once.
func peaked(peak *atomic.Int64, h http.Handler) http.Handler {
	var cur atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		h.ServeHTTP(w, r)
	})
}

// runUpstream serves the slow upstream until ctx is done.
func runUpstream(ctx context.Context, args []string, stderr io.Writer) error {
	defDelay, err := delayFromEnv(30 * time.Second)
	if err != nil {
		return err
	}
	fs := newFlagSet("loginstorm upstream", "Usage: loginstorm upstream [flags]\n\nServes the slow upstream, a fake LLM provider that answers every request after -delay, until interrupted.\n", stderr)
	addr := fs.String("addr", "127.0.0.1:4001", "address to listen on")
	delay := fs.Duration("delay", defDelay, delayUsage)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *delay < 0 {
		return fmt.Errorf("loginstorm: -delay must be >= 0, got %v", *delay)
	}
	fmt.Fprintf(stderr, "upstream on http://%s, answering after %v\n", *addr, *delay)
	return serveUntilDone(ctx, *addr, upstreamHandler(*delay))
}

// runApp serves the app until ctx is done.
func runApp(ctx context.Context, args []string, stderr io.Writer) error {
	defMode := os.Getenv("MODE")
	if defMode == "" {
		defMode = modeShared
	}
	fs := newFlagSet("loginstorm app", "Usage: loginstorm app [flags]\n\nServes /login and /chat until interrupted; /chat calls the upstream.\n", stderr)
	addr := fs.String("addr", "127.0.0.1:3000", "address to listen on")
	upstream := fs.String("upstream", "http://127.0.0.1:4001", "the upstream's base URL")
	healthy := fs.String("healthy", "http://127.0.0.1:4002", "route mode: the healthy upstream's base URL")
	mode := fs.String("mode", defMode, "shared, bulkhead, priority, breaker or route, taken from $MODE if set")
	slow := fs.Duration("slow", defaultSlow, "breaker mode: how long a chat runs without an answer before it is slow; route mode: five probe intervals")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *slow <= 0 {
		return fmt.Errorf("loginstorm: -slow must be > 0, got %v", *slow)
	}
	ups := upstreams{slow: *upstream}
	if *mode == modeRoute {
		ups.healthy = *healthy
	}
	a, err := newApp(*mode, ups, *slow)
	if err != nil {
		return err
	}
	defer a.Close()
	fmt.Fprintf(stderr, "app (%s mode) on http://%s, upstream %s\n", *mode, *addr, *upstream)
	return serveUntilDone(ctx, *addr, a.handler)
}

// runLoadCmd runs the load against an app started elsewhere.
func runLoadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	defDelay, err := delayFromEnv(30 * time.Second)
	if err != nil {
		return err
	}
	var f loadFlags
	fs := newFlagSet("loginstorm load", "Usage: loginstorm load [flags]\n\nSends the chats, then the login waves, to an app started elsewhere and reports the logins' latency.\n", stderr)
	f.register(fs, defDelay)
	target := fs.String("target", "http://127.0.0.1:3000", "the app's base URL")
	warm := fs.Duration("warmup", 0, "route mode: a chat each warmup/24 for warmup, then warmup/6 of quiet, before the chats")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	if *warm < 0 {
		return fmt.Errorf("loginstorm: -warmup must be >= 0, got %v", *warm)
	}
	r, err := runLoad(ctx, loadConfig{
		Target:   *target,
		Chats:    f.chats,
		Logins:   f.logins,
		Rounds:   f.rounds,
		Gap:      waveGap,
		Warmup:   *warm,
		Timeout:  f.clientTimeout(),
		Label:    "load",
		Progress: stderr,
	})
	if err != nil {
		return err
	}
	mode := r.Mode
	if mode == "" {
		mode = *target
	}
	rows := []summary{{Mode: mode, loadResult: r}}
	if f.json {
		return writeJSON(stdout, f.params(), rows, nil, nil)
	}
	return writeTable(stdout, f.params(), rows, nil)
}
