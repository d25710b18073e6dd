package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// TestSimRoute spreads a steady load over three equivalent endpoints, one
// of which turns sick for two minutes, in simulated time (testing/synctest),
// and measures how each way of picking an endpoint shares the harm.
//
// Load: 200 calls a second for 240 s, evenly spaced, one goroutine per
// call, open loop. Endpoint 1 is sick from t = 60 s until t = 180 s.
//
// The dependency ("work" model), the same for every arm: a call needs 1
// unit of work times a jitter factor, uniform in [0.8, 1.2], drawn per call
// from a seeded math/rand/v2 source (the same factors in every arm), and an
// endpoint does the work of each of its calls at speed 1/latency (2 s when
// healthy), so a change of latency slows, or speeds up, the calls already
// in flight too. Each attempt's end is computed at its start, by
// integrating the piecewise constant speed, and the attempt sleeps until
// then (or until its context ends). Scenarios:
//
//   - slow: the sick endpoint's latency is 30 s instead of 2 s;
//   - fail: an attempt started on the sick endpoint while it is sick answers
//     an error (a 500) after 50 ms;
//   - hang: the sick endpoint does no work at all (speed 0), so its calls,
//     those in flight at 60 s included, answer nothing until their 60 s
//     attempt timeout ends them.
//
// Arms. Every arm gets the same model, at most 2 attempts per call, a wait
// of 10 ms ±50% (uniform) before the second, a 60 s timeout per attempt
// (a timeout is a failure, retried), and no bulkhead; a failed attempt's
// retry goes to another endpoint than the one that failed, in every arm:
//
//   - rr: round robin over one shared counter (the retry takes the next
//     counter values until one names another endpoint);
//   - random: uniform random (LiteLLM's simple-shuffle); the retry draws
//     among the two others;
//   - least: the fewest attempts in flight, ties broken at random
//     (LiteLLM's least-busy); the retry picks among the two others;
//   - watertight: compose.New with Retry (retry.New: MaxAttempts 2,
//     InitialInterval 10 ms, default Jitter 0.5) and Route, a route.Router
//     with route.Config defaults (Decay 10 s, OutlierFactor 4,
//     MaxEjectedShare 0.5, ProbeInterval 1 s) over 3 endpoints, each with
//     its own Attempt (deadline.New, 60 s) and Breaker (breaker.New:
//     ConsecutiveFailures 5, OpenTimeout 5 s, HalfOpenRequests 1). A retry
//     avoids the endpoint tried, as route does by itself.
//
// The baseline arms are plain Go here: a picker, the same retry loop, and
// the timeout as the model's known end (an attempt that would end after
// 60 s ends at 60 s with a timeout error).
//
// Figures, per scenario and arm, under keys "<scenario>_<arm>_<figure>":
//
//   - sick_share_pct: the share of the attempts started in [60 s, 180 s)
//     that went to the sick endpoint (an attempt is a run of the
//     dependency: for watertight, of fn, probes included; a breaker's
//     refusal is no attempt);
//   - p99_sick_s, p99_healthy_s, p99_ratio: the p99 of the caller-observed
//     latency (retries and waits included, failures too) of the calls
//     started in [60 s, 180 s), of those started in [20 s, 60 s), and the
//     first over the second. In the slow scenario the healthy phase holds
//     the calls in flight on the sick endpoint at 60 s, which the
//     slowdown stretches (a call started at 59 s takes about 16 s), so its
//     p99 is well above the model's; hence also
//   - p99_base_s: the p99 of the calls started in [20 s, 50 s), which end
//     by 52.4 s and so meet no fault in any scenario;
//   - failed: the calls that failed after their retries, over the whole
//     run;
//   - move_s: the time to move the traffic away: from t = 60 s to the end
//     of the last 1 s bin of [60 s, 180 s) in which more than 5% of the
//     attempts started went to the sick endpoint (0 if none did; -1 if the
//     last bin, [179 s, 180 s), did: never moved);
//   - return_s: the time to return after healing: from t = 180 s to the
//     start of the first 1 s bin k such that every 5 s window [j, j+5 s)
//     with k <= j <= 235 s sends the sick endpoint between 25% and 41% of
//     its attempts (near a fair third); -1 if the last window, [235 s,
//     240 s), does not;
//   - attempts, calls: the attempts and calls of the whole run.
//
// Targets (the issue's; logged, not enforced), for watertight in each
// scenario: a sick share of at most 1%, a sick-phase p99 of at most 1.5x
// the healthy phase's, a move within 1 s, and a return within the sick
// latency + 10 s = 40 s (the issue states that bound for the slow scenario;
// the fail and hang lines hold to the same 40 s). The test prints one JSON
// object on a line of its own and writes it to out/sim-route.json. It is
// skipped under -short.
func TestSimRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulation benchmark: run without -short, or ./run.sh")
	}
	jitter := routeJitter()
	arms := []struct {
		name  string
		build func(t *testing.T, r *routeRun) routeCaller
	}{
		{"rr", routeRoundRobin},
		{"random", routeRandom},
		{"least", routeLeast},
		{"watertight", routeWatertight},
	}
	report := map[string]float64{}
	for _, sc := range []string{"slow", "fail", "hang"} {
		t.Run(sc, func(t *testing.T) {
			for _, a := range arms {
				t.Run(a.name, func(t *testing.T) {
					r := &routeRun{scenario: sc, jitter: jitter}
					synctest.Test(t, func(t *testing.T) { r.simulate(t, a.build) })
					for k, v := range r.figures() {
						report[sc+"_"+a.name+"_"+k] = v
					}
				})
			}
		})
	}
	js, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(js))
	if err := os.WriteFile(filepath.Join("out", "sim-route.json"), js, 0o644); err != nil {
		t.Log(err)
	}
	for _, sc := range []string{"slow", "fail", "hang"} {
		g := func(k string) float64 { return report[sc+"_watertight_"+k] }
		share, ratio, move, ret := g("sick_share_pct"), g("p99_ratio"), g("move_s"), g("return_s")
		ok := share <= 1 && ratio <= 1.5 && move >= 0 && move <= 1 && ret >= 0 && ret <= 40
		t.Logf("target watertight, %s: sick share <= 1%%, sick p99 <= 1.5x healthy, move <= 1 s, return <= 40 s: "+
			"%.2f%%, %.2fx (%.2fx the base p99), %g s, %g s: %s", sc, share, ratio, g("p99_sick_s")/g("p99_base_s"), move, ret,
			map[bool]string{true: "met", false: "UNMET"}[ok])
	}
}

const (
	routeRate        = 200 // calls a second
	routeLength      = 240 * time.Second
	routeSickFrom    = 60 * time.Second
	routeSickTo      = 180 * time.Second
	routeHealthyFrom = 20 * time.Second
	routeBaseTo      = 50 * time.Second // calls started before end by 52.4 s
	routeN           = 3                // endpoints
	routeSickEp      = 1
	routeHealthyLat  = 2 * time.Second
	routeSlowLat     = 30 * time.Second
	routeFailAfter   = 50 * time.Millisecond
	routeTimeout     = 60 * time.Second
	routeAttempts    = 2
	routeWait        = 10 * time.Millisecond
	routeCalls       = int(routeLength / time.Second * routeRate)
	routeBins        = int(routeLength / time.Second)
	routeNever       = time.Duration(math.MaxInt64)
)

var (
	errRoute500     = errors.New("500 internal server error")
	errRouteTimeout = errors.New("attempt timed out")
)

// routeJitter returns each call's work, the same in every arm.
func routeJitter() []float64 {
	rng := rand.New(rand.NewPCG(2024, 60))
	w := make([]float64, routeCalls)
	for i := range w {
		w[i] = 0.8 + 0.4*rng.Float64()
	}
	return w
}

// routeCaller runs call i, of work w, through an arm.
type routeCaller func(ctx context.Context, i int, w float64) error

// routeRun is one arm's run of one scenario.
type routeRun struct {
	scenario string
	jitter   []float64
	start    time.Time

	inflight [routeN]atomic.Int64
	attempts [routeBins][routeN]atomic.Int64 // by the attempt's start
	total    atomic.Int64
	latency  []time.Duration // by call
	failed   []bool
	router   *route.Router // the watertight arm's
}

// latencyAt returns endpoint ep's latency at t (since the start), and
// until when it holds.
func (r *routeRun) latencyAt(ep int, t time.Duration) (lat, until time.Duration) {
	if ep != routeSickEp || r.scenario == "fail" {
		return routeHealthyLat, routeNever
	}
	switch {
	case t < routeSickFrom:
		return routeHealthyLat, routeSickFrom
	case t < routeSickTo && r.scenario == "hang":
		return routeNever, routeSickTo // no work done: speed 0
	case t < routeSickTo:
		return routeSlowLat, routeSickTo
	}
	return routeHealthyLat, routeNever
}

// model returns how long an attempt of work w started on ep at s (since
// the start) takes to answer, and whether its answer is an error;
// routeNever if it never answers.
func (r *routeRun) model(ep int, s time.Duration, w float64) (time.Duration, bool) {
	sick := ep == routeSickEp && s >= routeSickFrom && s < routeSickTo
	if sick && r.scenario == "fail" {
		return routeFailAfter, true
	}
	t := s
	for {
		lat, until := r.latencyAt(ep, t)
		can := float64(until-t) / float64(lat) // the work done by until
		if w <= can {
			return t + time.Duration(w*float64(lat)) - s, false
		}
		w -= can
		t = until
	}
}

// attempt runs one attempt of work w on ep: it answers when the model says,
// or at limit with errRouteTimeout, or when ctx ends.
func (r *routeRun) attempt(ctx context.Context, ep int, w float64, limit time.Duration) error {
	s := time.Since(r.start)
	if b := int(s / time.Second); b < routeBins {
		r.attempts[b][ep].Add(1)
	}
	r.total.Add(1)
	r.inflight[ep].Add(1)
	defer r.inflight[ep].Add(-1)
	d, fail := r.model(ep, s, w)
	wait, timedOut := d, false
	if d > limit {
		wait, timedOut = limit, true
	}
	if ctx.Done() == nil {
		time.Sleep(wait)
	} else {
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		}
	}
	switch {
	case timedOut:
		return errRouteTimeout
	case fail:
		return errRoute500
	}
	return nil
}

func (r *routeRun) simulate(t *testing.T, build func(*testing.T, *routeRun) routeCaller) {
	r.start = time.Now()
	r.latency = make([]time.Duration, routeCalls)
	r.failed = make([]bool, routeCalls)
	call := build(t, r)
	var wg sync.WaitGroup
	for i := range routeCalls {
		time.Sleep(time.Until(r.start.Add(time.Duration(i) * time.Second / routeRate)))
		wg.Go(func() {
			began := time.Now()
			err := call(context.Background(), i, r.jitter[i])
			r.latency[i] = time.Since(began)
			r.failed[i] = err != nil
		})
	}
	wg.Wait()
}

// routeBaseline returns a caller that makes up to routeAttempts attempts,
// each on the endpoint pick returns (tried: the endpoint that failed, or
// -1), with the retry's wait between them.
func routeBaseline(r *routeRun, seed uint64, pick func(rng *rand.Rand, tried int) int) routeCaller {
	return func(ctx context.Context, i int, w float64) error {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		tried := -1
		var err error
		for a := range routeAttempts {
			if a > 0 {
				time.Sleep(time.Duration(float64(routeWait) * (0.5 + rng.Float64())))
			}
			ep := pick(rng, tried)
			if err = r.attempt(ctx, ep, w, routeTimeout); err == nil {
				return nil
			}
			tried = ep
		}
		return err
	}
}

func routeRoundRobin(_ *testing.T, r *routeRun) routeCaller {
	var next atomic.Uint64
	return routeBaseline(r, 1, func(_ *rand.Rand, tried int) int {
		for {
			if ep := int((next.Add(1) - 1) % routeN); ep != tried {
				return ep
			}
		}
	})
}

func routeRandom(_ *testing.T, r *routeRun) routeCaller {
	return routeBaseline(r, 2, func(rng *rand.Rand, tried int) int {
		if tried < 0 {
			return rng.IntN(routeN)
		}
		ep := rng.IntN(routeN - 1)
		if ep >= tried {
			ep++
		}
		return ep
	})
}

func routeLeast(_ *testing.T, r *routeRun) routeCaller {
	return routeBaseline(r, 3, func(rng *rand.Rand, tried int) int {
		var best [routeN]int
		n, least := 0, int64(math.MaxInt64)
		for ep := range routeN {
			if ep == tried {
				continue
			}
			switch f := r.inflight[ep].Load(); {
			case f < least:
				best[0], n, least = ep, 1, f
			case f == least:
				best[n] = ep
				n++
			}
		}
		return best[rng.IntN(n)]
	})
}

func routeWatertight(t *testing.T, r *routeRun) routeCaller {
	eps := make([]route.Endpoint, routeN)
	for i := range eps {
		name := fmt.Sprintf("ep%d", i)
		br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{Name: name, ConsecutiveFailures: 5, OpenTimeout: 5 * time.Second}))
		t.Cleanup(func() { br.Close() })
		at := must[*deadline.Deadline](t)(deadline.New(deadline.Config{Name: name, Timeout: routeTimeout}))
		eps[i] = route.Endpoint{Name: name, Breaker: br, Attempt: at}
	}
	router := must[*route.Router](t)(route.New(route.Config{Name: "llm", Endpoints: eps}))
	t.Cleanup(func() { router.Close() })
	r.router = router
	rt := must[*retry.Retry](t)(retry.New(retry.Config{Name: "llm", MaxAttempts: routeAttempts, InitialInterval: routeWait}))
	pipe := must[*compose.Pipeline](t)(compose.New("llm", compose.Policies{Retry: rt, Route: router}))
	return func(ctx context.Context, _ int, w float64) error {
		return pipe.Execute(ctx, func(ctx context.Context) error {
			ep, ok := route.EndpointOf(ctx)
			if !ok {
				return errors.New("no endpoint")
			}
			return r.attempt(ctx, ep.Index, w, routeNever)
		})
	}
}

// figures returns the run's figures (see TestSimRoute).
func (r *routeRun) figures() map[string]float64 {
	share := func(from, to int) float64 { // the sick endpoint's share of bins [from, to)
		var sick, all int64
		for b := from; b < to; b++ {
			for ep := range routeN {
				n := r.attempts[b][ep].Load()
				all += n
				if ep == routeSickEp {
					sick += n
				}
			}
		}
		if all == 0 {
			return 0
		}
		return float64(sick) / float64(all)
	}
	p99 := func(from, to time.Duration) time.Duration {
		lo, hi := int(from*routeRate/time.Second), int(to*routeRate/time.Second)
		v := slices.Clone(r.latency[lo:hi])
		slices.Sort(v)
		return v[int(math.Ceil(0.99*float64(len(v))))-1]
	}
	sickFrom, sickTo := int(routeSickFrom/time.Second), int(routeSickTo/time.Second)
	move := 0.0
	for b := sickTo - 1; b >= sickFrom; b-- {
		if share(b, b+1) > 0.05 {
			move = float64(b + 1 - sickFrom)
			if b == sickTo-1 {
				move = -1
			}
			break
		}
	}
	ret := -1.0
	for k := routeBins - 5; k >= sickTo; k-- {
		if s := share(k, k+5); s < 0.25 || s > 0.41 {
			break
		}
		ret = float64(k - sickTo)
	}
	failed := 0
	for _, f := range r.failed {
		if f {
			failed++
		}
	}
	ps, ph := p99(routeSickFrom, routeSickTo), p99(routeHealthyFrom, routeSickFrom)
	pb := p99(routeHealthyFrom, routeBaseTo)
	return map[string]float64{
		"sick_share_pct": math.Round(10000*share(sickFrom, sickTo)) / 100,
		"p99_sick_s":     ps.Seconds(),
		"p99_healthy_s":  ph.Seconds(),
		"p99_ratio":      math.Round(100*ps.Seconds()/ph.Seconds()) / 100,
		"p99_base_s":     pb.Seconds(),
		"failed":         float64(failed),
		"move_s":         move,
		"return_s":       ret,
		"attempts":       float64(r.total.Load()),
		"calls":          float64(routeCalls),
	}
}
