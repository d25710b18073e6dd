package route_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

type throttled struct{}

func (throttled) Error() string             { return "429" }
func (throttled) Is(target error) bool      { return target == policy.ErrThrottled }
func (throttled) RetryAfter() time.Duration { return 200 * time.Microsecond }

// TestStorm runs 100 000 calls from 32 goroutines through a Retry and a
// Route of 3 endpoints, each with a RateLimit, a Breaker and an Attempt
// timeout, while fn fails, is throttled, hangs, panics or succeeds at
// random, and a third of the callers give up early. Every call must end in
// one outcome, no endpoint may keep a call in flight, and the counters must
// equal what the callers and fn saw.
func TestStorm(t *testing.T) {
	calls := 100_000
	if testing.Short() {
		calls = 10_000
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	eps := names(3)
	for i := range eps {
		rl, err := ratelimit.New(ratelimit.Config{Name: eps[i].Name, MaxWait: time.Millisecond, MaxHold: time.Millisecond, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		br, err := breaker.New(breaker.Config{Name: eps[i].Name, ConsecutiveFailures: 10, OpenTimeout: time.Millisecond, MeterProvider: mp})
		if err != nil {
			t.Fatal(err)
		}
		defer br.Close()
		at, _ := deadline.New(deadline.Config{Name: eps[i].Name, Timeout: time.Millisecond})
		eps[i].RateLimit, eps[i].Breaker, eps[i].Attempt = rl, br, at
	}
	eps[2].MaxConcurrent = 4
	r := newRouter(t, route.Config{Name: "storm", Endpoints: eps, ProbeInterval: time.Millisecond, MeterProvider: mp})
	rt, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: 50 * time.Microsecond, MaxInterval: time.Millisecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	p := pipeline(t, compose.Policies{Retry: rt, Route: r})

	var ran, panics, unavailable atomic.Int64
	var mu sync.Mutex
	outcomes := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(calls) {
				outcome := stormCall(p, &ran, &panics)
				var ex *retry.ExhaustedError
				if errors.Is(outcome.err, route.ErrUnavailable) ||
					errors.As(outcome.err, &ex) && ex.Rejection != nil && errors.Is(ex.Rejection, route.ErrUnavailable) {
					unavailable.Add(1)
				}
				mu.Lock()
				outcomes[outcome.row]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("outcomes: %v", outcomes)
	for k, n := range outcomes {
		if k[0] == '!' {
			t.Errorf("%d calls: %s", n, k)
		}
	}
	for _, s := range r.Status() {
		if s.InFlight != 0 {
			t.Errorf("endpoint %s keeps %d calls in flight", s.Name, s.InFlight)
		}
	}
	got := sums(t, reader)
	// A pick leads to fn, to a refusal by the endpoint's policies, or to
	// a wait in its RateLimit that the caller ended.
	if least := ran.Load() + got["rejections/ratelimit"] + got["rejections/breaker"]; got["picks"] < least ||
		got["picks"] > least+int64(outcomes["caller"]) {
		t.Errorf("picks counted %d; want fn's runs and the endpoints' refusals, %d, plus at most the %d calls their callers ended",
			got["picks"], least, outcomes["caller"])
	}
	if got["rejections/route"] != unavailable.Load() {
		t.Errorf("route rejections counted %d; callers saw %d", got["rejections/route"], unavailable.Load())
	}
}

type stormOutcome struct {
	row string // starts with ! if wrong
	err error
}

// stormCall makes one call and names its outcome.
func stormCall(p *compose.Pipeline, ran, panics *atomic.Int64) (out stormOutcome) {
	ctx, cancel := context.WithCancel(context.Background())
	if rand.IntN(3) == 0 {
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
	}
	defer cancel()
	var fnRan atomic.Bool
	defer func() {
		if v := recover(); v != nil {
			out.row = "panic"
			if v != "boom" {
				out.row = fmt.Sprintf("!panic %v", v)
			}
		}
	}()
	err := p.Execute(ctx, func(ctx context.Context) error {
		fnRan.Store(true)
		ran.Add(1)
		switch rand.IntN(20) {
		case 0, 1, 2:
			return errDown
		case 3:
			return throttled{}
		case 4, 5:
			<-ctx.Done()
			return ctx.Err()
		case 6:
			panics.Add(1)
			panic("boom")
		}
		return nil
	})
	out.err = err
	var ex *retry.ExhaustedError
	switch {
	case err == nil:
		out.row = "success"
	case errors.As(err, &ex):
		out.row = "exhausted"
	case errors.Is(err, policy.ErrRejected) && fnRan.Load():
		out.row = "!rejected after fn ran: " + err.Error()
	case errors.Is(err, policy.ErrRejected):
		out.row = "rejected"
	case errors.Is(err, deadline.ErrExceeded):
		out.row = "timeout"
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		out.row = "caller"
	case errors.Is(err, errDown) || errors.Is(err, policy.ErrThrottled):
		out.row = "fn error"
	default:
		out.row = "!unexpected " + err.Error()
	}
	return out
}

// sums returns the route's picks and the rejections by kind.
func sums(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				kind, _ := dp.Attributes.Value("watertight.policy.kind")
				switch m.Name {
				case "watertight.route.picks":
					out["picks"] += dp.Value
				case "watertight.rejections":
					out["rejections/"+kind.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}
