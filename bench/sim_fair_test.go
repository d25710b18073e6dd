package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsadaptive "github.com/failsafe-go/failsafe-go/adaptivelimiter"
	fspriority "github.com/failsafe-go/failsafe-go/priority"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

const (
	fairTenants   = 10
	fairQuietRate = 10.0  // calls/s of each quiet tenant
	fairNoisyRate = 200.0 // calls/s of tenant 0, 20 times a quiet one's
	fairWork      = 100 * time.Millisecond
	fairLimit     = 20 // 200 calls/s at capacity: the quiet tenants' 90 and the noisy one's 200 do not fit
	fairRun       = 30 * time.Second
)

// TestSimFairShare runs ten tenants into one limit over a dependency at
// capacity, in simulated time (testing/synctest). Tenant 0 sends 200
// calls/s, the nine others 10 calls/s each, Poisson arrivals seeded per
// tenant and the same in every arm; each call holds a slot for 100 ms; a
// limit of 20 serves 200 calls/s. Arms:
//
//   - ours-fair: a bulkhead, Limit 20, MaxQueue 40, MaxWait 1 s,
//     FairShare, each call keyed by its tenant (policy.WithKey);
//   - ours-fifo: the same bulkhead without FairShare;
//   - ours-alone: ours-fifo without tenant 0's calls;
//   - failsafe-fair: failsafe-go's PriorityLimiter, WithLimits(20, 20,
//     20), WithMaxWaitTime(1s), its default queueing (2 to 3 times the
//     limit), a prioritizer with a UsageTracker (10 s window) calibrated
//     every 100 ms; every call Medium, its user the tenant;
//   - failsafe-alone: failsafe-fair without tenant 0's calls.
//
// Measured per arm: each quiet tenant's calls answered per second (mean
// and least), the quiet tenants' p99 latency (arrival to return, answered
// calls), tenant 0's calls answered per second, and the least, over the
// quiet tenants, of a tenant's answered calls over those it has in its
// family's alone arm. The target (ours-fair: least share >= 0.9) is
// logged, not enforced: cmd/benchtable reports it. The test prints one
// JSON object on a line of its own and writes it to out/sim-fair.json. It
// is skipped under -short.
func TestSimFairShare(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulation benchmark: run without -short, or ./run.sh")
	}
	arms := []*fairArm{
		{name: "ours-fair", build: oursFair(true), noisy: true},
		{name: "ours-fifo", build: oursFair(false), noisy: true},
		{name: "ours-alone", build: oursFair(false)},
		{name: "failsafe-fair", build: failsafeFair, noisy: true},
		{name: "failsafe-alone", build: failsafeFair},
	}
	report := map[string]float64{}
	for _, a := range arms {
		t.Run(a.name, func(t *testing.T) {
			synctest.Test(t, a.simulate)
		})
		for k, v := range a.figures() {
			report[a.name+"_"+k] = v
		}
	}
	alone := map[string]*fairArm{"ours-fair": arms[2], "ours-fifo": arms[2], "failsafe-fair": arms[4]}
	for _, a := range arms {
		if base := alone[a.name]; base != nil {
			report[a.name+"_quiet_least_share"] = a.leastShare(base)
		}
	}
	js, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(js))
	if err := os.WriteFile(filepath.Join("out", "sim-fair.json"), js, 0o644); err != nil {
		t.Log(err)
	}
	share := report["ours-fair_quiet_least_share"]
	t.Logf("target ours-fair: each quiet tenant >= 90%% of its goodput alone: least %.1f%%: %s", 100*share,
		map[bool]string{true: "met", false: "UNMET"}[share >= 0.9])
}

// keyedRun runs fn under the arm's limit for tenant.
type keyedRun func(ctx context.Context, tenant string, fn func(context.Context) error) error

type fairArm struct {
	name  string
	build func(ctx context.Context, t *testing.T) keyedRun
	noisy bool // tenant 0 sends its calls

	mu       sync.Mutex
	served   [fairTenants]int
	quietLat []time.Duration
}

func (a *fairArm) simulate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := a.build(ctx, t)
	var wg sync.WaitGroup
	for tenant := range fairTenants {
		if tenant == 0 && !a.noisy {
			continue
		}
		rate := fairQuietRate
		if tenant == 0 {
			rate = fairNoisyRate
		}
		wg.Go(func() { a.arrivals(run, tenant, rate, &wg) })
	}
	wg.Wait()
	cancel()
}

// arrivals starts tenant's calls for fairRun, Poisson at rate per second.
func (a *fairArm) arrivals(run keyedRun, tenant int, rate float64, wg *sync.WaitGroup) {
	rng := rand.New(rand.NewPCG(20261207, uint64(tenant)))
	name := "tenant-" + strconv.Itoa(tenant)
	end := time.Now().Add(fairRun)
	for {
		time.Sleep(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if !time.Now().Before(end) {
			return
		}
		wg.Go(func() {
			start := time.Now()
			err := run(context.Background(), name, func(context.Context) error { time.Sleep(fairWork); return nil })
			if err != nil {
				return
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.served[tenant]++
			if tenant != 0 {
				a.quietLat = append(a.quietLat, time.Since(start))
			}
		})
	}
}

func (a *fairArm) figures() map[string]float64 {
	quiet := a.served[1:]
	total := 0
	for _, n := range quiet {
		total += n
	}
	p99 := 0.0
	if n := len(a.quietLat); n > 0 {
		slices.Sort(a.quietLat)
		p99 = float64(a.quietLat[(n*99+99)/100-1].Microseconds()) / 1000
	}
	secs := fairRun.Seconds()
	return map[string]float64{
		"quiet_mean_per_s": float64(total) / float64(len(quiet)) / secs,
		"quiet_min_per_s":  float64(slices.Min(quiet)) / secs,
		"quiet_p99_ms":     p99,
		"noisy_per_s":      float64(a.served[0]) / secs,
	}
}

// leastShare is the least, over the quiet tenants, of a tenant's answered
// calls in a over those in base.
func (a *fairArm) leastShare(base *fairArm) float64 {
	least := 1.0
	for i := 1; i < fairTenants; i++ {
		if base.served[i] > 0 {
			least = min(least, float64(a.served[i])/float64(base.served[i]))
		}
	}
	return least
}

func oursFair(fair bool) func(context.Context, *testing.T) keyedRun {
	return func(_ context.Context, t *testing.T) keyedRun {
		b, err := bulkhead.New(bulkhead.Config{Name: "chat", Limit: fairLimit, MaxQueue: 2 * fairLimit,
			MaxWait: time.Second, FairShare: fair})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return func(ctx context.Context, tenant string, fn func(context.Context) error) error {
			return b.Execute(policy.WithKey(ctx, tenant), fn)
		}
	}
}

func failsafeFair(ctx context.Context, _ *testing.T) keyedRun {
	p := fsadaptive.NewPrioritizerBuilder().
		WithUsageTracker(fspriority.NewUsageTracker(10*time.Second, 100)).
		Build()
	p.ScheduleCalibrations(ctx, 100*time.Millisecond)
	l := fsadaptive.NewBuilder[any]().
		WithLimits(fairLimit, fairLimit, fairLimit).
		WithMaxWaitTime(time.Second).
		BuildPrioritized(p)
	ex := failsafe.With[any](l)
	return func(ctx context.Context, tenant string, fn func(context.Context) error) error {
		ctx = fspriority.ContextWithPriority(fspriority.ContextWithUser(ctx, tenant), fspriority.Medium)
		err := ex.WithContext(ctx).RunWithExecution(func(e failsafe.Execution[any]) error { return fn(e.Context()) })
		if err != nil && !errors.Is(err, fsadaptive.ErrExceeded) {
			return fmt.Errorf("failsafe-go: %w", err)
		}
		return err
	}
}
