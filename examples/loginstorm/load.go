package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// loadConfig is the seed's load: Chats chats at once (or spread evenly
// over Spread), then, Gap later, Logins logins at once, Rounds times, Gap
// apart.
type loadConfig struct {
	Target   string        // the app's base URL
	Chats    int           // chats sent at once at the start
	Spread   time.Duration // if set, chat i is sent at i x Spread / Chats
	Logins   int           // logins per wave
	Rounds   int           // login waves
	Gap      time.Duration // from the start to the first wave, and between waves
	Warmup   time.Duration // if set, a chat each Warmup/24 for Warmup, then Warmup/6 before the chats
	Timeout  time.Duration // the load client's timeout per request
	Label    string        // names the run in progress lines
	Progress io.Writer     // progress lines go here; nil means none
	Interval time.Duration // between progress lines; 0 means 1s
}

// loadResult is what one run of the load saw.
type loadResult struct {
	Mode        string          // the app's mode, from its Loginstorm-Mode header
	Logins      []time.Duration // every login's latency, sorted
	LoginErrors int             // logins that did not end in 200
	ChatOK      int             // chats answered 200
	OK          []time.Duration // their latencies, sorted
	Upstreams   map[string]int  // the chats answered 200 by upstream (route mode)
	ChatBusy    int             // chats answered 503 with a Retry-After
	Busy        []time.Duration // their latencies, sorted
	ChatOther   int             // chats answered otherwise, or not at all
	Wall        time.Duration   // from the first chat sent to the last answer read
	// UpstreamCalls are the requests each upstream got, the warm-up's
	// included (route mode, all-in-one).
	UpstreamCalls map[string]int
	// HealthyPeak is the most requests the healthy upstream served at
	// once, the warm-up's included (route mode, all-in-one).
	HealthyPeak int
}

// loadClient returns a client that cannot be the bottleneck: no limit per
// host, an idle pool as large as the load, no proxy, and timeout per request.
func loadClient(conns int, timeout time.Duration) (*http.Client, *http.Transport) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxConnsPerHost = 0
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: tr, Timeout: timeout}, tr
}

// counters are the load's live counts, read by the progress printer.
type counters struct {
	chatOK, chatBusy, chatOther atomic.Int64
	loginsDone                  atomic.Int64
}

// runLoad runs cfg's load against cfg.Target and returns what it saw. It
// returns early, with what it has, if ctx ends.
func runLoad(ctx context.Context, cfg loadConfig) (loadResult, error) {
	if cfg.Chats < 0 || cfg.Logins < 0 || cfg.Rounds < 1 {
		return loadResult{}, fmt.Errorf("loginstorm: need chats >= 0, logins >= 0, rounds >= 1; got %d, %d, %d",
			cfg.Chats, cfg.Logins, cfg.Rounds)
	}
	client, tr := loadClient(cfg.Chats+cfg.Logins*cfg.Rounds, cfg.Timeout)
	defer tr.CloseIdleConnections()

	var (
		c       counters
		wg      sync.WaitGroup
		mu      sync.Mutex
		logins  = make([]time.Duration, 0, cfg.Logins*cfg.Rounds)
		failed  int
		mode    atomic.Pointer[string]
		lastEnd atomic.Int64 // nanoseconds since start of the last answer read
	)
	stopWarmup := warmup(ctx, cfg, client)
	defer stopWarmup()
	if cfg.Warmup > 0 {
		// As each mode does, the storm starts from a collected heap: the
		// warm-up's garbage must not decide when a collection lands.
		runtime.GC()
	}
	start := time.Now()
	g := getter{ctx: ctx, client: client, target: cfg.Target, start: start, mode: &mode, lastEnd: &lastEnd}
	get := g.get

	stop := startProgress(cfg, &c, start)
	defer stop()

	var busy, ok []time.Duration
	upstreams := map[string]int{}
	sendChats(ctx, cfg, start, &wg, func() {
		switch status, d, up := get("/chat"); status {
		case http.StatusOK:
			c.chatOK.Add(1)
			mu.Lock()
			ok = append(ok, d)
			if up != "" {
				upstreams[up]++
			}
			mu.Unlock()
		case http.StatusServiceUnavailable:
			c.chatBusy.Add(1)
			mu.Lock()
			busy = append(busy, d)
			mu.Unlock()
		default:
			c.chatOther.Add(1)
		}
	})

	for round := 1; round <= cfg.Rounds; round++ {
		t := time.NewTimer(time.Until(start.Add(time.Duration(round) * cfg.Gap)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		for range cfg.Logins {
			wg.Go(func() {
				status, d, _ := get("/login")
				mu.Lock()
				logins = append(logins, d)
				if status != http.StatusOK {
					failed++
				}
				mu.Unlock()
				c.loginsDone.Add(1)
			})
		}
	}
	wg.Wait()

	slices.Sort(logins)
	slices.Sort(busy)
	slices.Sort(ok)
	r := loadResult{
		OK:          ok,
		Busy:        busy,
		Logins:      logins,
		LoginErrors: failed,
		ChatOK:      int(c.chatOK.Load()),
		ChatBusy:    int(c.chatBusy.Load()),
		ChatOther:   int(c.chatOther.Load()),
		Wall:        time.Duration(lastEnd.Load()),
	}
	if m := mode.Load(); m != nil {
		r.Mode = *m
	}
	if len(upstreams) > 0 {
		r.Upstreams = upstreams
	}
	return r, ctx.Err()
}

// warmup sends a chat each cfg.Warmup/24 for cfg.Warmup, then waits
// cfg.Warmup/6: the light traffic before the storm, which shows a router
// which upstream is slow. The returned stop cancels the warm-up's chats
// still running and waits for them.
func warmup(ctx context.Context, cfg loadConfig, client *http.Client) (stop func()) {
	if cfg.Warmup <= 0 {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 24 {
		if !sleepUntil(ctx, start.Add(time.Duration(i)*cfg.Warmup/24)) {
			break
		}
		wg.Go(func() {
			req, err := http.NewRequestWithContext(wctx, http.MethodGet, cfg.Target+"/chat", nil)
			if err != nil {
				return
			}
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	sleepUntil(ctx, start.Add(cfg.Warmup+cfg.Warmup/6))
	return func() {
		cancel()
		wg.Wait()
	}
}

// getter sends the load's requests, and records the app's mode and when the
// last answer was read.
type getter struct {
	ctx     context.Context
	client  *http.Client
	target  string
	start   time.Time
	mode    *atomic.Pointer[string]
	lastEnd *atomic.Int64 // nanoseconds since start of the last answer read
	tenant  string        // tenants mode: sent in tenantHeader, if set
}

// get returns the status of a GET of path (0 if it failed), 503 only with
// a Retry-After, how long it took, and the upstream that answered (route
// mode).
func (g getter) get(path string) (int, time.Duration, string) {
	t0 := time.Now()
	status, upstream := 0, ""
	req, err := http.NewRequestWithContext(g.ctx, http.MethodGet, g.target+path, nil)
	if err == nil && g.tenant != "" {
		req.Header.Set(tenantHeader, g.tenant)
	}
	if err == nil {
		var resp *http.Response
		if resp, err = g.client.Do(req); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				status = resp.StatusCode
			}
			if status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				status = 0
			}
			if m := resp.Header.Get(modeHeader); m != "" && g.mode.Load() == nil {
				g.mode.CompareAndSwap(nil, &m)
			}
			upstream = resp.Header.Get(upstreamHeader)
		}
	}
	d := time.Since(t0)
	end := int64(time.Since(g.start))
	for {
		old := g.lastEnd.Load()
		if end <= old || g.lastEnd.CompareAndSwap(old, end) {
			break
		}
	}
	return status, d, upstream
}

// sendChats runs chat cfg.Chats times on goroutines of wg, at once or
// spread over cfg.Spread from start, until ctx ends.
func sendChats(ctx context.Context, cfg loadConfig, start time.Time, wg *sync.WaitGroup, chat func()) {
	wg.Go(func() {
		for i := range cfg.Chats {
			if cfg.Spread > 0 && !sleepUntil(ctx, start.Add(time.Duration(i)*cfg.Spread/time.Duration(cfg.Chats))) {
				return
			}
			wg.Go(chat)
		}
	})
}

// sleepUntil waits for t, and reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// startProgress prints one line per cfg.Interval to cfg.Progress until the
// returned stop is called; stop waits for the printer to finish.
func startProgress(cfg loadConfig, c *counters, start time.Time) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	every := cfg.Interval
	if every <= 0 {
		every = time.Second
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		line := func(elapsed string) {
			ok, busy, other := c.chatOK.Load(), c.chatBusy.Load(), c.chatOther.Load()
			fmt.Fprintf(cfg.Progress, "%-8s %5s  chats %d/%d done (200: %d, 503: %d, other: %d)  logins %d/%d done\n",
				cfg.Label, elapsed, ok+busy+other, cfg.Chats, ok, busy, other,
				c.loginsDone.Load(), cfg.Logins*cfg.Rounds)
		}
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
