package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Tenants mode's load: what each tenant sends, within the first
// tenantWindow of the run, through the same chats' compartment.
const (
	noisyBurst  = 60                     // the noisy tenant's chats at once, at the start
	noisyStream = 30                     // then one each window/noisyStream, the last at the window's end
	quietChats  = 3                      // the quiet tenant's chats, one each window/(quietChats+1)
	tenantCap   = chatLimit - quietChats // armFair: the slots one tenant may hold, so that the quiet one's chats all fit
	tenantNoisy = "noisy"
	tenantQuiet = "quiet"
)

// tenantArms are tenants mode's arms, in the order they are reported.
var tenantArms = []string{armFIFO, armFair}

// tenantMinDelay is the delay above which tenants mode's counts are exact:
// the window, a quarter of it, and the last chat's patience end before it.
const tenantMinDelay = 4 * chatMaxWait / 3

// tenantWindow is the time over which the tenants send their chats for an
// upstream delay: a quarter of it (7.5 s for the seed's 30 s). It ends well
// before the first slots free, one delay in, and for a delay over 4/3 s
// (tenantMinDelay) the last chat's second of patience with it: no chat of
// the window can win a slot by waiting, so only the compartment's
// settings decide who runs.
func tenantWindow(delay time.Duration) time.Duration { return delay / 4 }

// tenantSend is one chat of tenants mode's load.
type tenantSend struct {
	at     time.Duration // from the start of the run
	tenant string
}

// tenantSchedule returns tenants mode's chats in the order they are sent.
func tenantSchedule(delay time.Duration) []tenantSend {
	w := tenantWindow(delay)
	out := make([]tenantSend, 0, noisyBurst+noisyStream+quietChats)
	for range noisyBurst {
		out = append(out, tenantSend{0, tenantNoisy})
	}
	for i := 1; i <= noisyStream; i++ {
		out = append(out, tenantSend{time.Duration(i) * w / noisyStream, tenantNoisy})
	}
	for i := 1; i <= quietChats; i++ {
		out = append(out, tenantSend{time.Duration(i) * w / (quietChats + 1), tenantQuiet})
	}
	slices.SortStableFunc(out, func(a, b tenantSend) int { return int(a.at - b.at) })
	return out
}

// tenantCounts are one tenant's live counts in one arm.
type tenantCounts struct {
	sent, ok, busy, other atomic.Int64
	mu                    sync.Mutex
	okTimes               []time.Duration // the latencies of the chats answered 200
}

// record counts a chat's answer: its status (as getter.get gives it) and
// how long it took.
func (c *tenantCounts) record(status int, d time.Duration) {
	switch status {
	case 200:
		c.ok.Add(1)
		c.mu.Lock()
		c.okTimes = append(c.okTimes, d)
		c.mu.Unlock()
	case 503:
		c.busy.Add(1)
	default:
		c.other.Add(1)
	}
}

// result returns what c counted, once every chat has been answered.
func (c *tenantCounts) result() tenantResult {
	ok := slices.Clone(c.okTimes)
	slices.Sort(ok)
	return tenantResult{Sent: int(c.sent.Load()), OK: ok, Busy: int(c.busy.Load()), Other: int(c.other.Load())}
}

// tenantResult is what one tenant's chats got in one arm.
type tenantResult struct {
	Sent  int             // chats sent
	OK    []time.Duration // the latencies of those answered 200, sorted
	Busy  int             // answered 503 with a Retry-After
	Other int             // answered otherwise, or not at all
}

// tenantArm is one arm of tenants mode: how each tenant fared.
type tenantArm struct {
	Arm     string
	Tenants map[string]tenantResult
	Wall    time.Duration // from the first chat sent to the last answer read
}

// runTenants runs tenants mode's arms at once, each with its own upstream,
// app and load.
func runTenants(ctx context.Context, f loadFlags, stderr io.Writer) ([]tenantArm, error) {
	arms := make([]tenantArm, len(tenantArms))
	errs := make([]error, len(tenantArms))
	stderr = &syncWriter{w: stderr} // the arms' progress lines
	var wg sync.WaitGroup
	for i, arm := range tenantArms {
		wg.Go(func() { arms[i], errs[i] = runTenantArm(ctx, arm, f, stderr) })
	}
	wg.Wait()
	return arms, errors.Join(errs...)
}

// runTenantArm starts a fresh upstream and app for arm on ephemeral ports,
// sends tenants mode's load, and shuts everything down.
func runTenantArm(ctx context.Context, arm string, f loadFlags, stderr io.Writer) (tenantArm, error) {
	up, err := listen("127.0.0.1:0", upstreamHandler(f.delay))
	if err != nil {
		return tenantArm{}, err
	}
	defer up.Close()
	a, err := newApp(arm, upstreams{slow: up.URL()}, slowFor(f.delay))
	if err != nil {
		return tenantArm{}, err
	}
	defer a.Close() // after the app's server is closed: deferred calls run last first
	srv, err := listen("127.0.0.1:0", a.handler)
	if err != nil {
		return tenantArm{}, err
	}
	defer srv.Close()
	return runTenantLoad(ctx, srv.URL(), arm, f, stderr)
}

// runTenantLoad sends tenantSchedule's chats to target, each with its
// tenant in tenantHeader, and returns how each tenant fared. It returns
// early, with what it has, if ctx ends.
func runTenantLoad(ctx context.Context, target, arm string, f loadFlags, progress io.Writer) (tenantArm, error) {
	sched := tenantSchedule(f.delay)
	client, tr := loadClient(len(sched), f.clientTimeout())
	defer tr.CloseIdleConnections()
	counts := map[string]*tenantCounts{tenantNoisy: {}, tenantQuiet: {}}
	var mode atomic.Pointer[string]
	var lastEnd atomic.Int64
	start := time.Now()
	stop := startTenantProgress(progress, "tenants/"+arm, counts, start)
	var wg sync.WaitGroup
	for _, s := range sched {
		if !sleepUntil(ctx, start.Add(s.at)) {
			break
		}
		c := counts[s.tenant]
		c.sent.Add(1)
		g := getter{ctx: ctx, client: client, target: target, start: start, mode: &mode, lastEnd: &lastEnd, tenant: s.tenant}
		wg.Go(func() {
			status, d, _ := g.get("/chat")
			c.record(status, d)
		})
	}
	wg.Wait()
	stop()
	out := tenantArm{Arm: arm, Tenants: map[string]tenantResult{}, Wall: time.Duration(lastEnd.Load())}
	for name, c := range counts {
		out.Tenants[name] = c.result()
	}
	return out, ctx.Err()
}

// startTenantProgress prints one line a second to w, nil for none, until
// the returned stop is called; stop prints the last line and waits for it.
func startTenantProgress(w io.Writer, label string, counts map[string]*tenantCounts, start time.Time) (stop func()) {
	if w == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	line := func(elapsed string) {
		n, q := counts[tenantNoisy], counts[tenantQuiet]
		fmt.Fprintf(w, "%-19s %5s  noisy %d/%d done (200: %d, 503: %d, other: %d)  quiet %d/%d done (200: %d, 503: %d, other: %d)\n",
			label, elapsed,
			n.ok.Load()+n.busy.Load()+n.other.Load(), noisyBurst+noisyStream, n.ok.Load(), n.busy.Load(), n.other.Load(),
			q.ok.Load()+q.busy.Load()+q.other.Load(), quietChats, q.ok.Load(), q.busy.Load(), q.other.Load())
	}
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				line(strconv.FormatFloat(time.Since(start).Seconds(), 'f', 1, 64) + "s")
				return
			case <-tick.C:
				line(strconv.FormatFloat(time.Since(start).Seconds(), 'f', 0, 64) + "s")
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// tenantJSON is one tenant of one arm in the -json output.
type tenantJSON struct {
	Chats     int     `json:"chats"`
	ChatOK    int     `json:"chat_ok"`
	ChatBusy  int     `json:"chat_busy"`
	ChatOther int     `json:"chat_other"`
	OKP99     float64 `json:"chat_200_p99_ms"` // 0 if none was answered 200
}

// tenantsJSON is tenants mode in the -json output: per arm, per tenant.
func tenantsJSON(arms []tenantArm) map[string]map[string]tenantJSON {
	out := make(map[string]map[string]tenantJSON, len(arms))
	for _, a := range arms {
		m := make(map[string]tenantJSON, len(a.Tenants))
		for name, t := range a.Tenants {
			m[name] = tenantJSON{Chats: t.Sent, ChatOK: len(t.OK), ChatBusy: t.Busy, ChatOther: t.Other, OKP99: ms(percentile(t.OK, 0.99))}
		}
		out[a.Arm] = m
	}
	return out
}

// writeTenants writes tenants mode's table: a line per arm and tenant,
// with the arm's wall time.
func writeTenants(w io.Writer, delay time.Duration, arms []tenantArm) error {
	win := tenantWindow(delay)
	fmt.Fprintf(w, "tenants: the noisy tenant sends %d chats at once, then %d over %v; the quiet one %d over the same %v; upstream delay %v\n",
		noisyBurst, noisyStream, win, quietChats, win, delay)
	fmt.Fprintf(w, "the chats' compartment: %d in flight, %d waiting, %v patience; with the fair share, a tenant holds at most %d slots\n\n",
		chatLimit, chatQueue, chatMaxWait, tenantCap)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Padded as writeStorm's mode column, to read left-aligned.
	fmt.Fprintf(tw, "%-10s\t%-6s\tchats\tchat 200\tchat 503\tchat other\t200 p99\twall\t\n", "arm", "tenant")
	for _, a := range arms {
		for _, name := range []string{tenantNoisy, tenantQuiet} {
			t := a.Tenants[name]
			p99 := "-"
			if len(t.OK) > 0 {
				p99 = fmtMs(percentile(t.OK, 0.99))
			}
			fmt.Fprintf(tw, "%-10s\t%-6s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", a.Arm, name, t.Sent, len(t.OK), t.Busy, t.Other, p99, fmtSec(a.Wall))
		}
	}
	return tw.Flush()
}
