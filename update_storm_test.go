package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

// limits is the history of the bulkhead limits an updater set, in order,
// each recorded before the Update that sets it.
type limits struct {
	mu   sync.Mutex
	seen []int
}

func (l *limits) add(n int) {
	l.mu.Lock()
	l.seen = append(l.seen, n)
	l.mu.Unlock()
}

// at returns the index of the newest limit recorded.
func (l *limits) at() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen) - 1
}

// most returns the highest limit that may have been in force between
// indexes from and to: the limit recorded before from may still have been
// in force at from.
func (l *limits) most(from, to int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.seen[max(from-1, 0) : to+1] {
		n = max(n, v)
	}
	return n
}

// stormConfig returns a random valid Config for the storm: limits up and
// down, queue sizes, timeouts and breaker thresholds.
func stormConfig() watertight.Config {
	us := func(lo, hi int) time.Duration { return time.Duration(lo+rand.IntN(hi-lo+1)) * time.Microsecond }
	dl := us(2000, 5000)
	br := &breaker.Config{ConsecutiveFailures: uint32(5 + rand.IntN(30)), OpenTimeout: us(500, 3000)}
	if rand.IntN(2) == 0 {
		br.FailureRatio, br.MinRequests, br.Window = 0.3+rand.Float64()/2, uint32(5+rand.IntN(20)), us(5000, 50000)
	}
	return watertight.Config{
		Bulkhead:  &bulkhead.Config{Limit: 1 + rand.IntN(48), MaxQueue: rand.IntN(34) - 1, MaxWait: us(0, 2000)},
		Deadline:  &deadline.Config{Timeout: dl},
		Retry:     &retry.Config{MaxAttempts: 1 + rand.IntN(4), InitialInterval: us(50, 200), MaxInterval: time.Millisecond},
		RateLimit: &ratelimit.Config{MaxWait: us(0, 2000), MaxHold: us(1000, 3000)},
		Breaker:   br,
		// Attempt timeouts count in a meter of their own: they are
		// attempts, not calls.
		Attempt: &deadline.Config{Timeout: us(500, int(dl/time.Microsecond)), MeterProvider: metricnoop.NewMeterProvider()},
	}
}

// breakConfig makes one field of cfg invalid.
func breakConfig(cfg watertight.Config) watertight.Config {
	switch rand.IntN(7) {
	case 0:
		cfg.Bulkhead.Limit = -rand.IntN(3)
	case 1:
		cfg.Bulkhead.MaxQueue = -2 - rand.IntN(5)
	case 2:
		cfg.Deadline.Timeout = -time.Duration(rand.IntN(5))
	case 3:
		cfg.Attempt.Timeout = cfg.Deadline.Timeout + time.Millisecond
	case 4:
		cfg.Breaker.FailureRatio = 1 + rand.Float64()
	case 5:
		cfg.Retry.MaxAttempts = -1
	default:
		cfg.Breaker = nil // removing a section
	}
	return cfg
}

// TestUpdateStorm runs 100 000 calls from 64 goroutines through a full
// pipeline while another goroutine updates it every millisecond with
// random valid and invalid configs. It checks that no call runs beyond the
// bulkhead limits that were in force while it was admitted, that every
// call ends in one outcome row, that the counters equal what the callers
// saw, that every invalid update left the Config in force as it was, and
// that afterwards no slot is lost and nobody waits.
func TestUpdateStorm(t *testing.T) {
	const calls, callers = 100_000, 64
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	first := stormConfig()
	p, err := watertight.New("storm", first, compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var hist limits
	hist.add(first.Bulkhead.Limit)

	var running atomic.Int64
	var over atomic.Int64
	var overMsg atomic.Value
	guarded := guardLimit{p: p, hist: &hist, running: &running, over: &over, overMsg: &overMsg}

	stop := make(chan struct{})
	updated := make(chan [2]int)
	go func() {
		applied, refused := 0, 0
		defer func() { updated <- [2]int{applied, refused} }()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last := p.Config()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			cfg := stormConfig()
			if rand.IntN(3) == 0 {
				if err := p.Update(breakConfig(cfg)); err == nil {
					t.Error("an invalid update was applied")
					return
				}
				refused++
				if got := p.Config(); !reflect.DeepEqual(got, last) {
					t.Errorf("after a refused update: Config %+v; want the one in force, %+v", got, last)
					return
				}
				continue
			}
			hist.add(cfg.Bulkhead.Limit)
			if err := p.Update(cfg); err != nil {
				t.Errorf("a valid update: %v", err)
				return
			}
			applied++
			last = p.Config()
		}
	}()
	counts := stormRowsN(t, guarded, calls, callers)
	close(stop)
	n := <-updated
	t.Logf("%d calls, %d updates applied, %d refused: %v", calls, n[0], n[1], counts)
	if over.Load() > 0 {
		t.Errorf("%d calls ran beyond the limits in force while they were admitted; one: %v", over.Load(), overMsg.Load())
	}
	if n[0] < 10 || n[1] < 5 {
		t.Errorf("%d updates applied and %d refused during the storm; want many of each", n[0], n[1])
	}
	checkCounted(t, reader, counts)

	// No slot lost, nobody waiting: every slot of a fresh limit is free.
	b := p.Bulkhead()
	if b.Active() != 0 || b.Queued() != 0 {
		t.Errorf("after the storm: Active %d, Queued %d; want 0 and 0", b.Active(), b.Queued())
	}
	cfg := stormConfig()
	cfg.Bulkhead.Limit = callers
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	var held []bulkhead.Permit
	for range callers {
		pm, err := b.Acquire(context.Background())
		if err != nil {
			t.Fatalf("slot %d of %d after the storm: %v", len(held)+1, callers, err)
		}
		held = append(held, pm)
	}
	for i := range held {
		held[i].Release()
	}
}

// guardLimit runs calls through p and counts, in over, the calls that run
// while more calls run than the highest bulkhead limit that was in force
// between the call's start and its fn's.
type guardLimit struct {
	p       *watertight.Pipeline
	hist    *limits
	running *atomic.Int64
	over    *atomic.Int64
	overMsg *atomic.Value
}

func (g guardLimit) Execute(ctx context.Context, fn policy.Func) error {
	from := g.hist.at()
	err := g.p.Execute(ctx, g.guard(from, fn))
	if errors.Is(err, policy.ErrRejected) {
		// A caller turned away comes back a little later, as a client
		// told 503 does, so that most calls are admitted.
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
	}
	return err
}

// guard returns fn, counting the calls beyond the limits in force since
// from.
func (g guardLimit) guard(from int, fn policy.Func) policy.Func {
	return func(ctx context.Context) error {
		n := g.running.Add(1)
		defer g.running.Add(-1)
		if most := g.hist.most(from, g.hist.at()); n > int64(most) {
			g.over.Add(1)
			g.overMsg.Store(fmt.Sprintf("%d running, limits at most %d", n, most))
		}
		// The dependency's work: the call holds its slot a while.
		t := time.NewTimer(time.Duration(rand.IntN(1000)) * time.Microsecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return fn(ctx)
	}
}
