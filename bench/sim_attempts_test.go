package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	fshedge "github.com/failsafe-go/failsafe-go/hedgepolicy"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/retry"
)

// TestSimAttempts measures how many attempts a
// dependency receives per call when retries draw on a budget, and how much
// of the slow tail hedging cuts, and at what cost in attempts, simulated
// under testing/synctest (the fake clock makes the 40 s and 50 s runs take
// a second or so of wall time each).
//
// Outage amplification: calls arrive one per millisecond, open loop (each
// arrival a goroutine of its own, started from one generator goroutine at
// fixed intervals); every attempt fails after 5 ms; MaxAttempts 3, waits of
// 50 ms then 100 ms (InitialInterval 50 ms, multiplier 2, no jitter), no
// deadline. The run lasts 40 s; the calls that arrive in the 30 s after a
// 10 s warm-up are measured (all their attempts, whenever they run, the
// run waiting for the last of them): attempts per call, for
//
//   - amp_nobudget: watertight's retry.Retry without a budget;
//   - amp_ours: the same with a retry.Budget at its defaults (Ratio 0.2,
//     Window 10 s, MinPerSecond 10);
//   - amp_failsafe: failsafe-go's retrypolicy (WithMaxAttempts(3),
//     WithBackoff(50ms, 10s)) with its budget at its defaults (budget.New():
//     retries and hedges in flight at most 0.2 x executions in flight, at
//     least 3).
//
// retried_share_10pct: the same arrivals through ours with a budget, when
// each attempt fails independently with probability 0.1 (a deterministic
// hash of the call's and the attempt's numbers) after 5 ms and succeeds
// otherwise: the share of the measured calls whose first attempt failed
// that were retried (made a second attempt).
//
// Tail latency: each attempt takes a uniform 8-12 ms, except 5% that take
// 100 ms (drawn from a deterministic hash of the call's and the attempt's
// numbers, the same in every arm), and never fails; it returns as soon as
// its context is canceled. 10 000 calls arrive at 200 per second, open
// loop; MaxHedges 1. Measured: each call's latency (start to return, the
// p50 and p99 from histograms of 0.1 ms buckets, rounded up to the
// bucket's upper edge) and the attempts started per call, for
//
//   - tail_p50_ms, tail_p99_nohedge_ms: no hedging (fn called directly);
//   - tail_*_ours_fixed: hedge.Hedge with a fixed Delay of 15 ms;
//   - tail_*_ours_quantile: hedge.Hedge with a learned delay, Quantile 0.9
//     (of the last 1000 latencies, no hedge on delay before 20);
//   - tail_*_failsafe_fixed: failsafe-go's hedgepolicy.NewWithDelay(15ms);
//   - tail_*_failsafe_quantile: hedgepolicy.NewWithDelayQuantile(0.9, 1000,
//     20) (quantile 0.9, an age of 1000 executions and no hedge before 20,
//     the same memory and warm-up as ours).
//
// The targets (amp_ours <= 1.25, retried_share_10pct >= 0.99; our p99 at
// most 3 x tail_p50_ms in both modes, with at most 1.08 attempts per call
// (fixed) and 1.15 (quantile); in each mode a p99 no worse than
// failsafe-go's, or fewer attempts per call) are logged, not enforced:
// cmd/benchtable reports them. The test prints one JSON object on a line of
// its own (fmt.Println) and writes it to out/sim-attempts.json. It is
// skipped under -short and under the race detector.
func TestSimAttempts(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulation benchmark (about 200 000 simulated calls): run without -short, or ./run.sh")
	}
	if raceEnabled {
		t.Skip("a simulation benchmark (about 200 000 simulated calls): too slow under the race detector")
	}
	wallStart := time.Now()
	arms := []*attemptsArm{
		{name: "nobudget", build: oursRetry(false), failP: 1},
		{name: "ours", build: oursRetry(true), failP: 1},
		{name: "failsafe", build: failsafeRetry, failP: 1},
		{name: "ours-10pct", build: oursRetry(true), failP: 0.1},
	}
	tails := []*tailArm{
		{name: "nohedge", build: func(*testing.T) runner { return func(fn func(context.Context) error) error { return fn(bg) } }},
		{name: "ours-fixed", build: oursHedge(hedge.Config{Delay: 15 * time.Millisecond})},
		{name: "ours-quantile", build: oursHedge(hedge.Config{Quantile: 0.9})},
		{name: "failsafe-fixed", build: failsafeHedge(func() fshedge.HedgePolicy[any] { return fshedge.NewWithDelay[any](15 * time.Millisecond) })},
		{name: "failsafe-quantile", build: failsafeHedge(func() fshedge.HedgePolicy[any] { return fshedge.NewWithDelayQuantile[any](0.9, 1000, 20) })},
	}
	t.Run("arms", func(t *testing.T) {
		for _, a := range arms {
			t.Run(a.name, func(t *testing.T) {
				t.Parallel()
				a.simulate(t)
			})
		}
		for _, a := range tails {
			t.Run("tail-"+a.name, func(t *testing.T) {
				t.Parallel()
				a.simulate(t)
			})
		}
	})
	if t.Failed() {
		return
	}
	r := attemptsReport{
		AmpNoBudget:       round(arms[0].amp(), 3),
		AmpOurs:           round(arms[1].amp(), 3),
		AmpFailsafe:       round(arms[2].amp(), 3),
		RetriedShare10pct: round(arms[3].retriedShare(), 4),

		TailP50Ms:                 round(tails[0].hist.quantileMs(0.5), 1),
		TailP99NoHedgeMs:          round(tails[0].hist.quantileMs(0.99), 1),
		TailP99OursFixedMs:        round(tails[1].hist.quantileMs(0.99), 1),
		TailAttemptsOursFixed:     round(tails[1].perCall(), 3),
		TailP99OursQuantileMs:     round(tails[2].hist.quantileMs(0.99), 1),
		TailAttemptsOursQuantile:  round(tails[2].perCall(), 3),
		TailP99FailsafeFixedMs:    round(tails[3].hist.quantileMs(0.99), 1),
		TailAttemptsFailsafeFixed: round(tails[3].perCall(), 3),
		TailP99FailsafeQuantileMs: round(tails[4].hist.quantileMs(0.99), 1),
		TailAttemptsFailsafeQuant: round(tails[4].perCall(), 3),
		WallS:                     round(time.Since(wallStart).Seconds(), 1),
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(js))
	for _, v := range r.targets() {
		t.Logf("target %-32s %-10s %s", v.what, v.got, map[bool]string{true: "met", false: "UNMET"}[v.ok])
	}
	if err := os.MkdirAll("out", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("out", "sim-attempts.json"), append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// attemptsReport is the JSON TestSimAttempts prints, in the terms.
type attemptsReport struct {
	AmpNoBudget       float64 `json:"amp_nobudget"`
	AmpOurs           float64 `json:"amp_ours"`
	AmpFailsafe       float64 `json:"amp_failsafe"`
	RetriedShare10pct float64 `json:"retried_share_10pct"`

	TailP50Ms                 float64 `json:"tail_p50_ms"`
	TailP99NoHedgeMs          float64 `json:"tail_p99_nohedge_ms"`
	TailP99OursFixedMs        float64 `json:"tail_p99_ours_fixed_ms"`
	TailAttemptsOursFixed     float64 `json:"tail_attempts_ours_fixed"`
	TailP99OursQuantileMs     float64 `json:"tail_p99_ours_quantile_ms"`
	TailAttemptsOursQuantile  float64 `json:"tail_attempts_ours_quantile"`
	TailP99FailsafeFixedMs    float64 `json:"tail_p99_failsafe_fixed_ms"`
	TailAttemptsFailsafeFixed float64 `json:"tail_attempts_failsafe_fixed"`
	TailP99FailsafeQuantileMs float64 `json:"tail_p99_failsafe_quantile_ms"`
	TailAttemptsFailsafeQuant float64 `json:"tail_attempts_failsafe_quantile"`

	WallS float64 `json:"wall_s"`
}

// targets are the issue's: two for the budget, three for hedging.
func (r attemptsReport) targets() []simVerdict {
	beats := func(p99, att, fsP99, fsAtt float64) bool { return p99 <= fsP99 || att < fsAtt }
	return []simVerdict{
		{"amp_ours <= 1.25", fmt.Sprintf("%.3f", r.AmpOurs), r.AmpOurs <= 1.25},
		{"retried_share_10pct >= 0.99", fmt.Sprintf("%.4f", r.RetriedShare10pct), r.RetriedShare10pct >= 0.99},
		{"fixed: p99 <= 3 x p50, <= 1.08 attempts/call",
			fmt.Sprintf("%.1f ms (p50 %.1f), %.3f", r.TailP99OursFixedMs, r.TailP50Ms, r.TailAttemptsOursFixed),
			r.TailP99OursFixedMs <= 3*r.TailP50Ms && r.TailAttemptsOursFixed <= 1.08},
		{"quantile: p99 <= 3 x p50, <= 1.15 attempts/call",
			fmt.Sprintf("%.1f ms (p50 %.1f), %.3f", r.TailP99OursQuantileMs, r.TailP50Ms, r.TailAttemptsOursQuantile),
			r.TailP99OursQuantileMs <= 3*r.TailP50Ms && r.TailAttemptsOursQuantile <= 1.15},
		{"each mode: p99 <= failsafe's, or fewer attempts",
			fmt.Sprintf("fixed %.1f/%.3f vs %.1f/%.3f; quantile %.1f/%.3f vs %.1f/%.3f",
				r.TailP99OursFixedMs, r.TailAttemptsOursFixed, r.TailP99FailsafeFixedMs, r.TailAttemptsFailsafeFixed,
				r.TailP99OursQuantileMs, r.TailAttemptsOursQuantile, r.TailP99FailsafeQuantileMs, r.TailAttemptsFailsafeQuant),
			beats(r.TailP99OursFixedMs, r.TailAttemptsOursFixed, r.TailP99FailsafeFixedMs, r.TailAttemptsFailsafeFixed) &&
				beats(r.TailP99OursQuantileMs, r.TailAttemptsOursQuantile, r.TailP99FailsafeQuantileMs, r.TailAttemptsFailsafeQuant)},
	}
}

// The simulation's constants.
const (
	attemptsWarmup   = 10 * time.Second
	attemptsMeasured = 30 * time.Second
	attemptsEvery    = time.Millisecond
	attemptsLatency  = 5 * time.Millisecond
	attemptsMax      = 3
	attemptsInitial  = 50 * time.Millisecond
)

var errSimDown = errors.New("503 Service Unavailable")

// runner runs fn under one arm's retry policy.
type runner func(fn func(context.Context) error) error

// attemptsArm is one configuration of the simulation and what it measured.
type attemptsArm struct {
	name  string
	build func(t *testing.T) runner // called inside the arm's bubble
	failP float64                   // probability that an attempt fails

	calls, attempts    atomic.Int64 // of the measured calls
	failedFirst, again atomic.Int64 // measured calls whose first attempt failed; of those, retried
	wall               time.Duration
}

func oursRetry(withBudget bool) func(t *testing.T) runner {
	return func(t *testing.T) runner {
		cfg := retry.Config{
			MaxAttempts:     attemptsMax,
			InitialInterval: attemptsInitial,
			Jitter:          -1,
			MeterProvider:   noop.NewMeterProvider(),
		}
		if withBudget {
			b, err := retry.NewBudget(retry.BudgetConfig{})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Budget = b
		}
		r, err := retry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return func(fn func(context.Context) error) error { return r.Execute(bg, fn) }
	}
}

func failsafeRetry(*testing.T) runner {
	rp := fsretry.NewBuilder[any]().
		WithMaxAttempts(attemptsMax).
		WithBackoff(attemptsInitial, 10*time.Second).
		WithBudget(fsbudget.New()).
		Build()
	ex := failsafe.With[any](rp)
	return func(fn func(context.Context) error) error {
		return ex.RunWithExecution(func(e failsafe.Execution[any]) error { return fn(e.Context()) })
	}
}

// simulate runs the 40 s of arrivals in a bubble of its own (the budgets
// read the clock, so they are built inside it).
func (a *attemptsArm) simulate(t *testing.T) {
	start := time.Now()
	synctest.Test(t, func(t *testing.T) {
		run := a.build(t)
		var wg sync.WaitGroup
		total := int((attemptsWarmup + attemptsMeasured) / attemptsEvery)
		first := int(attemptsWarmup / attemptsEvery)
		for i := range total {
			measured := i >= first
			wg.Go(func() {
				n := 0
				firstFailed := false
				err := run(func(ctx context.Context) error {
					n++
					time.Sleep(attemptsLatency)
					if fails(a.failP, i, n) {
						if n == 1 {
							firstFailed = true
						}
						return errSimDown
					}
					return nil
				})
				if err != nil && !errors.Is(err, errSimDown) && !errors.Is(err, fsbudget.ErrExceeded) {
					t.Errorf("%s: call %d: %v", a.name, i, err)
				}
				if measured {
					a.calls.Add(1)
					a.attempts.Add(int64(n))
					if firstFailed {
						a.failedFirst.Add(1)
						if n > 1 {
							a.again.Add(1)
						}
					}
				}
			})
			time.Sleep(attemptsEvery)
		}
		wg.Wait()
	})
	a.wall = time.Since(start)
	t.Logf("%s: %d calls measured, %.3f attempts per call, %d first attempts failed, %d of them retried, wall %v",
		a.name, a.calls.Load(), a.amp(), a.failedFirst.Load(), a.again.Load(), a.wall.Round(time.Millisecond))
}

// fails says whether attempt n of call i fails: always for p >= 1, else
// when a hash of (i, n) falls below p, the same for every arm and run.
func fails(p float64, i, n int) bool {
	if p >= 1 {
		return true
	}
	x := uint64(i)<<8 | uint64(n)
	x += 0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11)/(1<<53) < p
}

func (a *attemptsArm) amp() float64 {
	return float64(a.attempts.Load()) / float64(a.calls.Load())
}

func (a *attemptsArm) retriedShare() float64 {
	if a.failedFirst.Load() == 0 {
		return 0
	}
	return float64(a.again.Load()) / float64(a.failedFirst.Load())
}

// The tail simulation's constants.
const (
	tailCalls = 10000
	tailEvery = 5 * time.Millisecond // 200 calls per second
)

// tailArm is one configuration of the tail simulation and what it
// measured.
type tailArm struct {
	name     string
	build    func(t *testing.T) runner
	hist     *latHist
	calls    atomic.Int64
	attempts atomic.Int64
	wall     time.Duration
}

func oursHedge(cfg hedge.Config) func(t *testing.T) runner {
	return func(t *testing.T) runner {
		cfg.MeterProvider = noop.NewMeterProvider()
		h, err := hedge.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return func(fn func(context.Context) error) error {
			_, err := hedge.Do(bg, h, nil, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
			return err
		}
	}
}

func failsafeHedge(build func() fshedge.HedgePolicy[any]) func(t *testing.T) runner {
	return func(*testing.T) runner {
		ex := failsafe.With[any](build())
		return func(fn func(context.Context) error) error {
			return ex.RunWithExecution(func(e failsafe.Execution[any]) error { return fn(e.Context()) })
		}
	}
}

// tailLatency is how long attempt n of call i takes: 100 ms for 5% of
// attempts, else uniform in [8, 12] ms.
func tailLatency(i, n int) time.Duration {
	x := uint64(i)<<8 | uint64(n)
	x += 0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	u := float64(x>>11) / (1 << 53)
	if u < 0.05 {
		return 100 * time.Millisecond
	}
	v := (u - 0.05) / 0.95 // uniform in [0, 1)
	return 8*time.Millisecond + time.Duration(v*float64(4*time.Millisecond))
}

func (a *tailArm) simulate(t *testing.T) {
	start := time.Now()
	a.hist = newLatHist()
	synctest.Test(t, func(t *testing.T) {
		run := a.build(t)
		var wg sync.WaitGroup
		for i := range tailCalls {
			wg.Go(func() {
				var n atomic.Int64
				begin := time.Now()
				err := run(func(ctx context.Context) error {
					k := int(n.Add(1))
					tm := time.NewTimer(tailLatency(i, k))
					defer tm.Stop()
					select {
					case <-tm.C:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				if err != nil {
					t.Errorf("%s: call %d: %v", a.name, i, err)
				}
				a.hist.add(time.Since(begin))
				a.calls.Add(1)
				a.attempts.Add(n.Load())
			})
			time.Sleep(tailEvery)
		}
		wg.Wait()
	})
	a.wall = time.Since(start)
	t.Logf("%s: p50 %.1f ms, p99 %.1f ms, %.3f attempts per call, wall %v",
		a.name, a.hist.quantileMs(0.5), a.hist.quantileMs(0.99), a.perCall(), a.wall.Round(time.Millisecond))
}

// perCall is the attempts started per call. An attempt counts as started
// when fn is called; a loser canceled before its fn ran is not counted.
func (a *tailArm) perCall() float64 {
	return float64(a.attempts.Load()) / float64(a.calls.Load())
}
