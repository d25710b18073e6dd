package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

var errDependency = errors.New("dependency failed")

// throttledErr is a 429 with a Retry-After, as httppolicy reports one.
type throttledErr struct{ after time.Duration }

func (e throttledErr) Error() string             { return "throttled" }
func (e throttledErr) Is(target error) bool      { return target == policy.ErrThrottled }
func (e throttledErr) RetryAfter() time.Duration { return e.after }

// row is one row of the README's outcome table.
type row string

const (
	rowSuccess   row = "success"
	rowRejected  row = "rejected (fn never ran)"
	rowDeadline  row = "our deadline fired"
	rowExhausted row = "retry gave up"
	rowCallers   row = "caller's ctx error"
	rowFnError   row = "fn's error"
)

// rowsOf returns every row whose description err matches. callerDone says
// whether the caller's own ctx had ended.
func rowsOf(err error, callerDone bool) []row {
	if err == nil {
		return []row{rowSuccess}
	}
	var rows []row
	rejected := errors.Is(err, policy.ErrRejected)
	exceeded := errors.Is(err, deadline.ErrExceeded)
	exhausted := errors.Is(err, retry.ErrExhausted)
	ctxErr := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	if rejected {
		rows = append(rows, rowRejected)
	}
	if exceeded && !exhausted {
		rows = append(rows, rowDeadline)
	}
	if exhausted {
		// The rows are read from the top: an ExhaustedError wraps the last
		// attempt's error, which may be a timeout.
		rows = append(rows, rowExhausted)
	}
	if ctxErr && !exceeded && !exhausted {
		if callerDone {
			rows = append(rows, rowCallers)
		} else {
			rows = append(rows, "ctx error while the caller's ctx was live")
		}
	}
	if !rejected && !exceeded && !exhausted && !ctxErr {
		rows = append(rows, rowFnError)
	}
	return rows
}

// stormRows runs calls through p from 24 goroutines: fn succeeds, fails,
// is throttled with a short Retry-After, or hangs until its ctx ends, and
// a third of the callers give up early. It checks that every call matches
// exactly one row, that a rejection means fn never ran in the call, and
// that "our deadline fired" means it did; it returns the count per row.
func stormRows(t *testing.T, p policy.Policy, calls int) map[row]int {
	t.Helper()
	return stormRowsN(t, p, calls, 24)
}

// stormRowsN is stormRows from the given number of goroutines.
func stormRowsN(t *testing.T, p policy.Policy, calls, goroutines int) map[row]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[row]int{}
	bad := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(calls) {
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
				}
				var ran atomic.Bool
				err := p.Execute(ctx, func(ctx context.Context) error {
					ran.Store(true)
					switch rand.IntN(10) {
					case 0, 1:
						return errDependency
					case 2:
						return throttledErr{after: time.Duration(1+rand.IntN(2000)) * time.Microsecond}
					case 3:
						<-ctx.Done()
						return ctx.Err()
					}
					return nil
				})
				callerDone := ctx.Err() != nil
				cancel()
				rows := rowsOf(err, callerDone)
				mu.Lock()
				switch {
				case len(rows) != 1:
					bad[fmt.Sprintf("%v: %v", rows, err)]++
				case rows[0] == rowRejected && ran.Load() && !errors.Is(err, retry.ErrExhausted):
					bad[fmt.Sprintf("rejected after fn ran: %v", err)]++
				case (rows[0] == rowDeadline || rows[0] == rowExhausted) && !ran.Load():
					bad[fmt.Sprintf("%s though fn never ran: %v", rows[0], err)]++
				default:
					counts[rows[0]]++
					var rej *policy.RejectedError
					var ex *retry.ExhaustedError
					if errors.As(err, &ex) && ex.Rejection != nil {
						rej = ex.Rejection
					} else if !errors.As(err, &rej) {
						rej = nil
					}
					if rej != nil {
						counts[row(rej.Kind+"/"+rej.Reason)]++
					}
					if ee, ok := errors.AsType[*deadline.ExceededError](err); ok && rows[0] == rowDeadline {
						counts[row("timeout/"+ee.Name)]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		var keys []string
		for k := range bad {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i == 10 {
				t.Errorf("... and %d more kinds", len(keys)-10)
				break
			}
			t.Errorf("%d calls: %s", bad[k], k)
		}
	}
	return counts
}

// hedgedAround runs each call with hedge.Do around p.
type hedgedAround struct {
	h *hedge.Hedge
	p policy.Policy
}

func (a hedgedAround) Execute(ctx context.Context, fn policy.Func) error {
	_, err := hedge.Do(ctx, a.h, a.p, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// TestEveryCallMatchesOneRow storms pipelines with every slot (RateLimit
// holds, whole-call and attempt deadlines, a breaker, callers that give
// up), with a Retry in the Retry slot and with a Hedge around the
// pipeline, and checks that every call ends in exactly one row of the
// outcome table.
func TestEveryCallMatchesOneRow(t *testing.T) {
	calls := 100_000
	if testing.Short() {
		calls = 10_000
	}
	repeaters := map[string]func(t *testing.T, mp metric.MeterProvider) policy.Policy{
		"retry": func(t *testing.T, mp metric.MeterProvider) policy.Policy {
			r, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: 100 * time.Microsecond, MaxInterval: time.Millisecond, MeterProvider: mp})
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
		"hedge": nil, // around the pipeline
	}
	for name, repeater := range repeaters {
		t.Run(name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			bh, err := bulkhead.New(bulkhead.Config{Limit: 16, MaxQueue: 16, MaxWait: time.Millisecond, MeterProvider: mp})
			if err != nil {
				t.Fatal(err)
			}
			defer bh.Close()
			dl, _ := deadline.New(deadline.Config{Name: "call", Timeout: 2 * time.Millisecond, MeterProvider: mp})
			rl, err := ratelimit.New(ratelimit.Config{MaxWait: 2 * time.Millisecond, MaxHold: 2 * time.Millisecond, MeterProvider: mp})
			if err != nil {
				t.Fatal(err)
			}
			br, err := breaker.New(breaker.Config{ConsecutiveFailures: 20, OpenTimeout: time.Millisecond, MeterProvider: mp})
			if err != nil {
				t.Fatal(err)
			}
			defer br.Close()
			// The Attempt timeout counts in a meter of its own: its
			// timeouts are attempts, not calls.
			at, _ := deadline.New(deadline.Config{Name: "attempt", Timeout: time.Millisecond})
			ps := compose.Policies{Bulkhead: bh, Deadline: dl, RateLimit: rl, Breaker: br, Attempt: at}
			if repeater != nil {
				ps.Retry = repeater(t, mp)
			}
			p, err := compose.New("rows", ps)
			if err != nil {
				t.Fatal(err)
			}
			var run policy.Policy = p
			if repeater == nil {
				h, err := hedge.New(hedge.Config{MaxHedges: 2, Delay: 300 * time.Microsecond})
				if err != nil {
					t.Fatal(err)
				}
				run = hedgedAround{h, p}
			}
			counts := stormRows(t, run, calls)
			t.Logf("%s: %v", name, counts)
			if repeater != nil {
				// Around a hedge, each attempt is a pipeline call of its
				// own, counted as one.
				checkCounted(t, reader, counts)
			}
		})
	}
}

// checkCounted checks that the counters equal what the callers saw, row by
// row: watertight.rejections by kind and reason (a rejection, or the
// refusal inside a retry's ExhaustedError), watertight.timeouts and
// watertight.retry.exhausted.
func checkCounted(t *testing.T, r *sdkmetric.ManualReader, seen map[row]int) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counted := map[row]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				kind, _ := dp.Attributes.Value("watertight.policy.kind")
				name, _ := dp.Attributes.Value("watertight.policy.name")
				reason, _ := dp.Attributes.Value("watertight.rejection.reason")
				switch m.Name {
				case "watertight.rejections":
					counted[row(kind.AsString()+"/"+reason.AsString())] += int(dp.Value)
				case "watertight.timeouts":
					counted[row("timeout/"+name.AsString())] += int(dp.Value)
				case "watertight.retry.exhausted":
					counted[rowExhausted] += int(dp.Value)
				}
			}
		}
	}
	for k, n := range counted {
		if seen[k] != n {
			t.Errorf("%s: counted %d, callers saw %d", k, n, seen[k])
		}
	}
	for k, n := range seen {
		if _, ok := counted[k]; !ok && strings.Contains(string(k), "/") && !strings.HasPrefix(string(k), "timeout/") {
			t.Errorf("%s: callers saw %d, none counted", k, n)
		}
	}
	for _, k := range []row{"timeout/call", rowExhausted} {
		if _, ok := counted[k]; !ok && seen[k] > 0 {
			t.Errorf("%s: callers saw %d, none counted", k, seen[k])
		}
	}
}

// TestEveryRoutedCallMatchesOneRow storms a pipeline whose Retry sits over
// a Route of three endpoints, each with its own RateLimit, Breaker and
// Attempt, and checks that every call ends in exactly one row. The
// endpoints' refusals are no outcome of a call (the attempt goes on to
// another endpoint), so the route's own rejections are checked against
// the callers', not the endpoints'.
func TestEveryRoutedCallMatchesOneRow(t *testing.T) {
	calls := 100_000
	if testing.Short() {
		calls = 10_000
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var eps []route.Endpoint
	for _, name := range []string{"a", "b", "c"} {
		rl, err := ratelimit.New(ratelimit.Config{Name: name, MaxWait: 2 * time.Millisecond, MaxHold: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		br, err := breaker.New(breaker.Config{Name: name, ConsecutiveFailures: 20, OpenTimeout: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer br.Close()
		at, _ := deadline.New(deadline.Config{Name: "attempt", Timeout: time.Millisecond})
		eps = append(eps, route.Endpoint{Name: name, RateLimit: rl, Breaker: br, Attempt: at, MaxConcurrent: 6})
	}
	r, err := route.New(route.Config{Name: "rows", Endpoints: eps, ProbeInterval: time.Millisecond, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	bh, _ := bulkhead.New(bulkhead.Config{Limit: 16, MaxQueue: 16, MaxWait: time.Millisecond})
	defer bh.Close()
	dl, _ := deadline.New(deadline.Config{Name: "call", Timeout: 2 * time.Millisecond})
	rt, _ := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: 100 * time.Microsecond, MaxInterval: time.Millisecond})
	p, err := compose.New("rows", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt, Route: r})
	if err != nil {
		t.Fatal(err)
	}
	counts := stormRows(t, p, calls)
	t.Logf("%v", counts)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counted := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "watertight.rejections" {
				for _, dp := range sum.DataPoints {
					counted += int(dp.Value)
				}
			}
		}
	}
	if seen := counts["route/unavailable"]; counted != seen {
		t.Errorf("route rejections: counted %d, callers saw %d", counted, seen)
	}
	for _, s := range r.Status() {
		if s.InFlight != 0 {
			t.Errorf("endpoint %s keeps %d calls in flight", s.Name, s.InFlight)
		}
	}
}
