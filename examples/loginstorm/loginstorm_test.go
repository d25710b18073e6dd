package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run the real thing with a short delay: real servers, real
// sockets, real time. Timing assertions are deliberately loose: the
// machines that run them are small and shared.

func ms2d(ms ...int) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	fifty := hundred[:50]
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"no samples", nil, 0.99, 0},
		{"one sample p50", ms2d(7), 0.5, 7 * time.Millisecond},
		{"one sample p99", ms2d(7), 0.99, 7 * time.Millisecond},
		{"50 samples p99 is the max", fifty, 0.99, 50 * time.Millisecond},
		{"50 samples p50 is the 25th", fifty, 0.5, 25 * time.Millisecond},
		{"100 samples p99 is the 99th", hundred, 0.99, 99 * time.Millisecond},
		{"100 samples p50 is the 50th", hundred, 0.5, 50 * time.Millisecond},
		{"100*0.07 rounds to rank 7, not 8", hundred, 0.07, 7 * time.Millisecond},
		{"p100 is the max", hundred, 1, 100 * time.Millisecond},
		{"tiny p is the min", hundred, 0.001, 1 * time.Millisecond},
		{"250 samples p99 is the 248th", make250(), 0.99, 248 * time.Millisecond},
		{"10 samples p50 is the 5th", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.5, 5 * time.Millisecond},
		{"10 samples p99 is the max", ms2d(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%d samples, %v) = %v, want %v", len(tt.sorted), tt.p, got, tt.want)
			}
		})
	}
}

func make250() []time.Duration {
	out := make([]time.Duration, 250)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Millisecond
	}
	return out
}

func TestParseDelay(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"30s", 30 * time.Second, false},
		{"1500ms", 1500 * time.Millisecond, false},
		{"30000", 30 * time.Second, false},
		{"0", 0, false},
		{"-1s", 0, true},
		{"-5", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseDelay(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseDelay(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseDelay(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown mode", []string{"-mode", "sideways"}, "-mode must be"},
		{"no rounds", []string{"-rounds", "0"}, "-rounds must be >= 1"},
		{"no logins", []string{"-logins", "0"}, "-logins must be >= 1"},
		{"negative chats", []string{"-chats", "-1"}, "-chats must be >= 0"},
		{"negative delay", []string{"-delay", "-1s"}, "-delay must be >= 0"},
		{"unknown subcommand", []string{"stampede"}, `unknown subcommand "stampede"`},
		{"load: no rounds", []string{"load", "-rounds", "0"}, "-rounds must be >= 1"},
		{"app: unknown mode", []string{"app", "-mode", "sideways", "-addr", "127.0.0.1:0"}, "mode must be"},
		{"upstream: negative delay", []string{"upstream", "-delay", "-1s"}, "-delay must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), tt.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestBadDelayEnv(t *testing.T) {
	t.Setenv("DELAY", "soon")
	err := run(t.Context(), []string{"-mode", "bulkhead"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DELAY") {
		t.Fatalf("run with DELAY=soon = %v, want an error naming DELAY", err)
	}
}

// jsonKeys are the keys every mode has in the -json output.
var jsonKeys = []string{
	"chat_503_max_ms", "chat_503_p50_ms", "chat_busy", "chat_ok", "chat_other", "login_errors", "login_max_ms",
	"login_p50_ms", "login_p99_ms", "logins", "wall_ms",
}

// routeKeys are the keys route mode adds.
var routeKeys = []string{"chat_200_p99_ms", "storm_chats_to_slow", "upstream_calls", "healthy_peak"}

// checkRoute asserts the outcome of route mode: the healthy upstream
// answers routeHealthy chats in its own delay, no chat of the storm goes to
// the slow upstream, and the logins walk in.
func checkRoute(t *testing.T, m modeJSON, delay time.Duration) {
	t.Helper()
	// The healthy cap, less one or two places a warm-up chat still running
	// on a busy machine may take. More if the storm's chats reached the app
	// more slowly than the healthy upstream answers (a loaded machine): the
	// first answered free their places. The cap itself is the healthy
	// upstream's peak.
	if m.ChatOK < routeHealthy-2 || m.ChatOK+m.ChatBusy != 80 || m.ChatOther != 0 {
		t.Errorf("route chats = %d x 200, %d x 503, %d other; want at least %d (the cap less 2), the rest 503, 0 other", m.ChatOK, m.ChatBusy, m.ChatOther, routeHealthy-2)
	}
	if m.HealthyPeak == nil || *m.HealthyPeak > routeHealthy {
		t.Errorf("route: %v requests at once at the healthy upstream; want at most its MaxConcurrent, %d", deref(m.HealthyPeak), routeHealthy)
	}
	if m.StormSlow == nil || *m.StormSlow != 0 || m.UpstreamCalls["slow"] == 0 || m.UpstreamCalls["healthy"] < routeHealthy {
		t.Errorf("route: %v storm chats to the slow upstream, upstream calls %v; want none, and the warm-up's on both", deref(m.StormSlow), m.UpstreamCalls)
	}
	// A loose bound, not the demo's target (twice the healthy delay): no
	// chat answered 200 waited for the slow upstream.
	if m.OKP99 == nil || *m.OKP99 >= ms(delay) {
		t.Errorf("route chat 200 p99 = %v ms; want under the slow upstream's %v", deref(m.OKP99), delay)
	}
	if m.Logins != 50 || m.LoginErrors != 0 || m.LoginP99 >= 500 {
		t.Errorf("route logins = %d, %d errors, p99 %v ms; want 50, 0 errors, < 500 ms", m.Logins, m.LoginErrors, m.LoginP99)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// decodeReport checks the -json output's shape and returns it decoded.
func decodeReport(t *testing.T, out []byte, modes ...string) reportJSON {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"delay_ms", "chats", "logins_per_round", "rounds", "modes"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, out)
		}
	}
	rawModes, _ := raw["modes"].(map[string]any)
	var gotModes []string
	for m, v := range rawModes {
		gotModes = append(gotModes, m)
		fields, _ := v.(map[string]any)
		var keys []string
		for k, v := range fields {
			keys = append(keys, k)
			if _, ok := v.(float64); !ok && k != "upstream_calls" {
				t.Errorf("modes.%s.%s = %v, want a number", m, k, v)
			}
		}
		slices.Sort(keys)
		want := jsonKeys
		if m == modeRoute {
			want = slices.Sorted(slices.Values(append(slices.Clone(jsonKeys), routeKeys...)))
		}
		if !slices.Equal(keys, want) {
			t.Errorf("modes.%s has keys %v, want %v", m, keys, want)
		}
	}
	slices.Sort(gotModes)
	slices.Sort(modes)
	if !slices.Equal(gotModes, modes) {
		t.Errorf("JSON modes = %v, want %v", gotModes, modes)
	}
	if bytes.Count(out, []byte("\n")) != 1 {
		t.Errorf("want one line of JSON, got %q", out)
	}
	var r reportJSON
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkBulkhead asserts the seed's outcome for bulkhead mode.
func checkBulkhead(t *testing.T, m modeJSON, logins int) {
	t.Helper()
	if m.ChatOK != chatLimit || m.ChatBusy != 80-chatLimit || m.ChatOther != 0 {
		t.Errorf("bulkhead chats = %d x 200, %d x 503, %d other; want 10, 70, 0", m.ChatOK, m.ChatBusy, m.ChatOther)
	}
	if m.Logins != logins || m.LoginErrors != 0 {
		t.Errorf("bulkhead logins = %d, %d errors; want %d, 0 errors", m.Logins, m.LoginErrors, logins)
	}
	if m.LoginP99 >= 500 {
		t.Errorf("bulkhead login p99 = %v ms, want < 500 ms: logins waited for chats", m.LoginP99)
	}
	if m.LoginP50 > m.LoginP99 || m.LoginP99 > m.LoginMax {
		t.Errorf("bulkhead p50 %v, p99 %v, max %v are out of order", m.LoginP50, m.LoginP99, m.LoginMax)
	}
}

// checkPriority asserts the outcome of priority mode: the logins walk into
// the reserved slots, and the chats that cannot run are answered 503 with
// Retry-After.
func checkPriority(t *testing.T, m modeJSON) {
	t.Helper()
	if want := serverSlots - loginReserve; m.ChatOK != want || m.ChatBusy != 80-want || m.ChatOther != 0 {
		t.Errorf("priority chats = %d x 200, %d x 503, %d other; want %d, %d, 0", m.ChatOK, m.ChatBusy, m.ChatOther, want, 80-want)
	}
	if m.Logins != 50 || m.LoginErrors != 0 {
		t.Errorf("priority logins = %d, %d errors; want 50, 0 errors", m.Logins, m.LoginErrors)
	}
	if m.LoginP99 >= 500 {
		t.Errorf("priority login p99 = %v ms, want < 500 ms: logins waited for chats", m.LoginP99)
	}
}

// checkSpread asserts what the breaker adds with the chats spread over two
// delays: after the first chats have turned slow, the breaker answers the
// others 503 at once, where the bulkhead alone lets them take the slots
// the slow ones free, for the whole delay, or wait their 1 s for one.
func checkSpread(t *testing.T, spread map[string]modeJSON) {
	t.Helper()
	bh, br := spread[modeBulkhead], spread[modeBreaker]
	if bh.ChatOK+bh.ChatBusy != 80 || br.ChatOK+br.ChatBusy != 80 || bh.ChatOther+br.ChatOther != 0 {
		t.Fatalf("spread chats: bulkhead %+v, breaker %+v; want 80 answered 200 or 503 each", bh, br)
	}
	if br.ChatOK >= bh.ChatOK {
		t.Errorf("chats that held a slot for the delay: breaker %d, bulkhead %d; want fewer with the breaker", br.ChatOK, bh.ChatOK)
	}
	if br.BusyP50 >= 500 || bh.BusyP50 < 900 {
		t.Errorf("503 p50: breaker %v ms, bulkhead %v ms; want the breaker's at once (< 500) and the bulkhead's after its 1 s wait", br.BusyP50, bh.BusyP50)
	}
}

// TestAllModes runs the all-in-one command, every mode, at a 2 s delay.
func TestAllModes(t *testing.T) {
	var out, progress bytes.Buffer
	if err := run(t.Context(), []string{"-delay", "2s", "-json"}, &out, &progress); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out.Bytes())
	r := decodeReport(t, out.Bytes(), modeShared, modeBulkhead, modePriority, modeRoute)
	if r.DelayMs != 2000 || r.Chats != 80 || r.Logins != 50 || r.Rounds != 1 {
		t.Errorf("JSON params = %+v, want delay 2000 ms, 80 chats, 50 logins, 1 round", r)
	}

	shared := r.Modes[modeShared]
	if shared.ChatOK != 80 || shared.ChatBusy != 0 || shared.ChatOther != 0 {
		t.Errorf("shared chats = %d x 200, %d x 503, %d other; want 80, 0, 0", shared.ChatOK, shared.ChatBusy, shared.ChatOther)
	}
	if shared.Logins != 50 || shared.LoginErrors != 0 {
		t.Errorf("shared logins = %d, %d errors; want 50, 0 errors", shared.Logins, shared.LoginErrors)
	}
	// The logins arrive 1 s in and wait behind 30 queued chats until the
	// first wave of 50 ends, at 2 s: about 1 s each. (The brief's ">= 1.9 s"
	// would hold with logins sent at 0 s; they are sent 1 s in, as the
	// seed's are.)
	if shared.LoginP50 < 900 {
		t.Errorf("shared login p50 = %v ms, want >= 900 ms: logins did not wait for the chats", shared.LoginP50)
	}
	if shared.Wall < 3900 {
		t.Errorf("shared wall = %v ms, want >= 3900: the last 30 chats wait for the first 50", shared.Wall)
	}

	bh := r.Modes[modeBulkhead]
	checkBulkhead(t, bh, 50)
	// checkBulkhead bounds bulkhead's p99 by 500 ms, shared's p50 is above
	// 900 ms: far below, without a tight timing assertion.
	if want := shared.LoginP99 / bh.LoginP99; r.P99Ratio < want*0.99 || r.P99Ratio > want*1.01 {
		t.Errorf("p99_ratio = %v, want shared/bulkhead = %v", r.P99Ratio, want)
	}

	checkPriority(t, r.Modes[modePriority])
	checkRoute(t, r.Modes[modeRoute], 2*time.Second)
	checkSpread(t, r.Spread)
	if len(r.Tenants[armFIFO]) != 2 || len(r.Tenants[armFair]) != 2 { // TestTenants checks the counts
		t.Errorf("JSON tenants = %v, want both arms, each with the noisy and the quiet tenant", r.Tenants)
	}

	for _, want := range []string{"shared ", "bulkhead ", "priority ", "route ", "chats 80/80 done (200: 80, 503: 0, other: 0)", "logins 50/50 done"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress has no %q:\n%s", want, progress.String())
		}
	}
}

// TestTenants runs tenants mode at a 2 s delay. The counts are exact: no
// chat of the window can win a slot by waiting (tenantWindow), so only the
// chats' compartment decides who runs. Without the fair share the noisy
// tenant holds every slot, and the quiet tenant's chats find none; with it
// the noisy tenant holds at most tenantCap, and the quiet one's chats,
// never more than chatLimit-tenantCap at once, always find a free slot.
func TestTenants(t *testing.T) {
	var out, progress bytes.Buffer
	if err := run(t.Context(), []string{"-mode", "tenants", "-delay", "2s", "-json"}, &out, &progress); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out.Bytes())
	r := decodeReport(t, out.Bytes()) // no login storm mode ran
	for _, arm := range []string{armFIFO, armFair} {
		for _, name := range []string{tenantNoisy, tenantQuiet} {
			tj, sent := r.Tenants[arm][name], noisyBurst+noisyStream
			if name == tenantQuiet {
				sent = quietChats
			}
			if tj.Chats != sent || tj.ChatOK+tj.ChatBusy != sent || tj.ChatOther != 0 {
				t.Errorf("%s %s: %+v; want %d chats, each answered 200 or 503", arm, name, tj, sent)
			}
			if (tj.ChatOK > 0) != (tj.OKP99 > 0) {
				t.Errorf("%s %s: %d chats answered 200, p99 %v ms; want a p99 if and only if some were", arm, name, tj.ChatOK, tj.OKP99)
			}
		}
	}
	fifo, fair := r.Tenants[armFIFO], r.Tenants[armFair]
	if q := fifo[tenantQuiet]; q.ChatOK != 0 || q.ChatBusy != quietChats {
		t.Errorf("without the fair share the quiet tenant got %d x 200, %d x 503; want 0, %d", q.ChatOK, q.ChatBusy, quietChats)
	}
	if n := fifo[tenantNoisy]; n.ChatOK != chatLimit || n.ChatBusy != noisyBurst+noisyStream-chatLimit {
		t.Errorf("without the fair share the noisy tenant got %d x 200, %d x 503; want %d, %d", n.ChatOK, n.ChatBusy, chatLimit, noisyBurst+noisyStream-chatLimit)
	}
	if q := fair[tenantQuiet]; q.ChatOK != quietChats || q.ChatBusy != 0 {
		t.Errorf("with the fair share the quiet tenant got %d x 200, %d x 503; want %d, 0", q.ChatOK, q.ChatBusy, quietChats)
	}
	if n := fair[tenantNoisy]; n.ChatOK != tenantCap || n.ChatBusy != noisyBurst+noisyStream-tenantCap {
		t.Errorf("with the fair share the noisy tenant got %d x 200, %d x 503; want %d, %d", n.ChatOK, n.ChatBusy, tenantCap, noisyBurst+noisyStream-tenantCap)
	}
	for _, want := range []string{"tenants/fifo ", "tenants/fair_share ", "quiet 3/3 done (200: 3, 503: 0, other: 0)"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress has no %q:\n%s", want, progress.String())
		}
	}
}

// TestWriteTenants checks tenants mode's table.
func TestWriteTenants(t *testing.T) {
	arms := []tenantArm{
		{Arm: armFIFO, Wall: 30 * time.Second, Tenants: map[string]tenantResult{
			tenantNoisy: {Sent: 90, OK: ms2d(30002, 30004), Busy: 88},
			tenantQuiet: {Sent: 3, Busy: 3},
		}},
		{Arm: armFair, Wall: 35 * time.Second, Tenants: map[string]tenantResult{
			tenantNoisy: {Sent: 90, OK: ms2d(30001), Busy: 89},
			tenantQuiet: {Sent: 3, OK: ms2d(30001, 30002, 30003)},
		}},
	}
	var b bytes.Buffer
	if err := writeTenants(&b, 30*time.Second, arms); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"60 chats at once, then 30 over 7.5s; the quiet one 3 over the same 7.5s; upstream delay 30s",
		"a tenant holds at most 7 slots",
		"30 004 ms", "30 003 ms", "30.0 s", "35.0 s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table has no %q:\n%s", want, got)
		}
	}
	if lines := strings.Count(got, "\n"); lines != 8 {
		t.Errorf("table has %d lines, want 8 (2 of header, a blank, column names, 4 rows):\n%s", lines, got)
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitListening waits until addr accepts connections.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not listening: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestThreeTerminals runs the seed's walk-through: upstream, app and load
// as subcommands, configured through DELAY and MODE as in the seed, with
// two rounds of logins.
func TestThreeTerminals(t *testing.T) {
	t.Setenv("DELAY", "2000") // milliseconds, as the seed's DELAY_MS
	t.Setenv("MODE", modeBulkhead)
	upAddr, appAddr := freeAddr(t), freeAddr(t)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	var upLog, appLog bytes.Buffer
	wg.Go(func() { errs[0] = run(ctx, []string{"upstream", "-addr", upAddr}, io.Discard, &upLog) })
	wg.Go(func() {
		errs[1] = run(ctx, []string{"app", "-addr", appAddr, "-upstream", "http://" + upAddr}, io.Discard, &appLog)
	})
	stop := func() {
		cancel()
		wg.Wait()
	}
	defer stop()
	waitListening(t, upAddr)
	waitListening(t, appAddr)

	var out bytes.Buffer
	if err := run(t.Context(), []string{"load", "-target", "http://" + appAddr, "-rounds", "2", "-json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	stop()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: %v", i, err)
		}
	}
	if !strings.Contains(upLog.String(), "answering after 2s") {
		t.Errorf("upstream log = %q, want the delay from DELAY", upLog.String())
	}
	if !strings.Contains(appLog.String(), "bulkhead mode") {
		t.Errorf("app log = %q, want the mode from MODE", appLog.String())
	}

	r := decodeReport(t, out.Bytes(), modeBulkhead) // the mode comes from the app's header
	if r.Rounds != 2 || r.DelayMs != 2000 {
		t.Errorf("JSON rounds %d, delay %v ms; want 2, 2000", r.Rounds, r.DelayMs)
	}
	checkBulkhead(t, r.Modes[modeBulkhead], 100)
}

// TestLoadCancel checks that a cancelled load returns promptly with the
// context's error and leaves nothing running.
func TestLoadCancel(t *testing.T) {
	up, err := listen("127.0.0.1:0", upstreamHandler(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	a, err := newApp(modeShared, upstreams{slow: up.URL()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv, err := listen("127.0.0.1:0", a.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := runLoad(ctx, loadConfig{Target: srv.URL(), Chats: 5, Logins: 5, Rounds: 3, Gap: time.Second, Timeout: time.Hour})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("runLoad error = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("runLoad took %v after cancel", d)
	}
	if r.ChatOther != 5 || len(r.Logins) != 0 {
		t.Errorf("cancelled load: %d chats other, %d logins; want 5, 0", r.ChatOther, len(r.Logins))
	}
}

func TestWriteTable(t *testing.T) {
	rows := []summary{
		{Mode: modeShared, loadResult: loadResult{Logins: ms2d(29000, 29439), ChatOK: 80, Wall: 60 * time.Second}},
		{Mode: modeBulkhead, loadResult: loadResult{Logins: ms2d(1, 2), ChatOK: 10, ChatBusy: 70, Wall: 30 * time.Second}},
	}
	var b bytes.Buffer
	if err := writeTable(&b, params{Delay: 30 * time.Second, Chats: 80, Logins: 50, Rounds: 5}, rows, nil); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"80 chats at once, then 50 logins 1s later, 5 waves 1s apart (250 login samples); upstream delay 30s",
		"29 439 ms", "2.00 ms", "60.0 s", "30.0 s",
		"login p99: 14 720x lower with the bulkhead",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table has no %q:\n%s", want, got)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{1234 * time.Microsecond, "1.23 ms"},
		{12345 * time.Microsecond, "12.3 ms"},
		{308 * time.Millisecond, "308 ms"},
		{29439 * time.Millisecond, "29 439 ms"},
		{1234567 * time.Millisecond, "1 234 567 ms"},
	}
	for _, tt := range tests {
		if got := fmtMs(tt.d); got != tt.want {
			t.Errorf("fmtMs(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := group(-1234); got != "-1 234" {
		t.Errorf("group(-1234) = %q", got)
	}
}
