package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// StormConfig shapes [RunStorm]. Its zero value is the demo's storm: 20
// calls of 50 ms at once against a bulkhead of 2 with no queue.
type StormConfig struct {
	// Calls is the number of concurrent calls in the bulkhead phase; 0
	// means 20.
	Calls int
	// Limit is the bulkhead's Limit; 0 means 2.
	Limit int
	// Work is how long an admitted call runs; 0 means 50 ms.
	Work time.Duration
}

// Storm is what RunStorm's callers saw, phase by phase. The test holds the
// exported metrics and spans to these numbers.
type Storm struct {
	// Phase 1, pipeline "storm": Calls at once into a bulkhead with no
	// queue.
	StormCalls, StormOK, StormRejected int

	// Phase 2, pipeline "flaky": every call fails its first attempt and
	// succeeds on its second.
	FlakyCalls, FlakyOK, FlakyRetries int

	// Phase 3, pipeline "slow": each attempt outlives its 20 ms attempt
	// timeout; the retry gives up after 2 attempts. The breaker's slow
	// rule (10 ms) judges each attempt slow, and never trips: it needs
	// 1000 calls.
	SlowCalls, SlowTimeouts, SlowExhausted int

	// Phase 4, pipeline "down": the dependency always fails; the breaker
	// opens on the 3rd failure (the first call's last attempt) and rejects
	// every later call.
	DownCalls, DownAttempts, DownExhausted, DownRejected int

	// Phase 5, bulkhead "shed": one slot and one place in the queue; a
	// sheddable call waits, and a critical call takes its place.
	ShedCalls, ShedOK, ShedRejected int

	// Phase 6, pipeline "routed": a route over endpoints eu and us. eu
	// answers in 150 ms and us in 1 ms until eu is ejected; then eu heals,
	// and its next probe brings it back.
	RoutedCalls, RoutedEU, RoutedUS, RoutedEjections, RoutedReturns int

	// closers are the policies with observable instruments (the bulkhead's
	// active and queued gauges, the breaker's state gauge), kept registered
	// until Close so that a scrape after the storm still shows them.
	closers []io.Closer
}

// Close unregisters the observable instruments of the storm's policies. It
// returns nil.
func (s *Storm) Close() error {
	for _, c := range s.closers {
		c.Close()
	}
	s.closers = nil
	return nil
}

// Pipeline and policy names used by RunStorm (each policy is named after
// its pipeline, the attempt timeout of "slow" excepted).
const (
	nameStorm       = "storm"
	nameFlaky       = "flaky"
	nameSlow        = "slow"
	nameSlowAttempt = "slow-attempt"
	nameDown        = "down"
	nameShed        = "shed"
	nameRouted      = "routed"
)

var errUpstream = errors.New("upstream: 503")

// RunStorm runs the six phases in turn through pipelines built on tp and
// mp, writing one summary line per phase to log (if not nil). It returns an
// error only if a pipeline cannot be built or a call ends in a way the
// phase does not expect; even then, the caller must Close the Storm.
func RunStorm(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, cfg StormConfig, log io.Writer) (Storm, error) {
	if cfg.Calls == 0 {
		cfg.Calls = 20
	}
	if cfg.Limit == 0 {
		cfg.Limit = 2
	}
	if cfg.Work == 0 {
		cfg.Work = 50 * time.Millisecond
	}
	if log == nil {
		log = io.Discard
	}
	var s Storm
	phases := []func(context.Context, trace.TracerProvider, metric.MeterProvider, StormConfig, *Storm, io.Writer) error{
		bulkheadPhase, flakyPhase, slowPhase, downPhase, shedPhase, routedPhase,
	}
	for _, phase := range phases {
		if err := phase(ctx, tp, mp, cfg, &s, log); err != nil {
			return s, err
		}
	}
	return s, nil
}

// sleep waits d or until ctx is done, as a well-behaved dependency would.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func bulkheadPhase(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, cfg StormConfig, s *Storm, log io.Writer) error {
	bh, err := bulkhead.New(bulkhead.Config{Name: nameStorm, Limit: cfg.Limit, MaxQueue: 0, MeterProvider: mp})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, bh)
	p, err := compose.New(nameStorm, compose.Policies{Bulkhead: bh},
		compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		ok, rej  atomic.Int64
		mu       sync.Mutex
		firstErr error
	)
	for range cfg.Calls {
		wg.Go(func() {
			<-start
			err := p.Execute(ctx, func(ctx context.Context) error { return sleep(ctx, cfg.Work) })
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, bulkhead.ErrFull):
				rej.Add(1)
			default:
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	s.StormCalls, s.StormOK, s.StormRejected = cfg.Calls, int(ok.Load()), int(rej.Load())
	fmt.Fprintf(log, "storm: %d calls of %v at once, bulkhead limit %d, no queue: %d ok, %d rejected\n",
		s.StormCalls, cfg.Work, cfg.Limit, s.StormOK, s.StormRejected)
	if firstErr != nil {
		return fmt.Errorf("storm: unexpected error: %w", firstErr)
	}
	return nil
}

func flakyPhase(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, _ StormConfig, s *Storm, log io.Writer) error {
	r, err := retry.New(retry.Config{Name: nameFlaky, MaxAttempts: 3, InitialInterval: 5 * time.Millisecond,
		Jitter: -1, MeterProvider: mp})
	if err != nil {
		return err
	}
	p, err := compose.New(nameFlaky, compose.Policies{Retry: r},
		compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	const calls = 5
	for range calls {
		err := p.Execute(ctx, func(ctx context.Context) error {
			if retry.Attempt(ctx) == 1 {
				return errUpstream
			}
			s.FlakyRetries++
			return nil
		})
		if err != nil {
			return fmt.Errorf("flaky: unexpected error: %w", err)
		}
		s.FlakyOK++
	}
	s.FlakyCalls = calls
	fmt.Fprintf(log, "flaky: %d calls, each failing once: %d ok after %d retries\n", s.FlakyCalls, s.FlakyOK, s.FlakyRetries)
	return nil
}

func slowPhase(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, _ StormConfig, s *Storm, log io.Writer) error {
	total, err := deadline.New(deadline.Config{Name: nameSlow, Timeout: time.Second, MeterProvider: mp})
	if err != nil {
		return err
	}
	attempt, err := deadline.New(deadline.Config{Name: nameSlowAttempt, Timeout: 20 * time.Millisecond, MeterProvider: mp})
	if err != nil {
		return err
	}
	r, err := retry.New(retry.Config{Name: nameSlow, MaxAttempts: 2, InitialInterval: 5 * time.Millisecond,
		Jitter: -1, MeterProvider: mp})
	if err != nil {
		return err
	}
	br, err := breaker.New(breaker.Config{Name: nameSlow, ConsecutiveFailures: 1000, SlowCallRatio: 1,
		SlowCallDuration: 10 * time.Millisecond, SlowCallMinCalls: 1000, MeterProvider: mp})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, br)
	p, err := compose.New(nameSlow, compose.Policies{Deadline: total, Retry: r, Breaker: br, Attempt: attempt},
		compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	s.SlowCalls = 1
	err = p.Execute(ctx, func(ctx context.Context) error {
		err := sleep(ctx, time.Second)
		if errors.Is(err, context.DeadlineExceeded) {
			s.SlowTimeouts++
		}
		return err
	})
	if !errors.Is(err, retry.ErrExhausted) || !errors.Is(err, deadline.ErrExceeded) {
		return fmt.Errorf("slow: want an exhausted retry of attempt timeouts, got %w", err)
	}
	s.SlowExhausted++
	fmt.Fprintf(log, "slow: %d call, %d attempts cut by the 20ms attempt timeout, retry exhausted: %v\n",
		s.SlowCalls, s.SlowTimeouts, err)
	return nil
}

func downPhase(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, _ StormConfig, s *Storm, log io.Writer) error {
	r, err := retry.New(retry.Config{Name: nameDown, MaxAttempts: 3, InitialInterval: 5 * time.Millisecond,
		Jitter: -1, MeterProvider: mp})
	if err != nil {
		return err
	}
	br, err := breaker.New(breaker.Config{Name: nameDown, ConsecutiveFailures: 3, OpenTimeout: time.Minute, MeterProvider: mp})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, br)
	p, err := compose.New(nameDown, compose.Policies{Retry: r, Breaker: br},
		compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	const calls = 4
	for range calls {
		err := p.Execute(ctx, func(context.Context) error {
			s.DownAttempts++
			return errUpstream
		})
		switch {
		case errors.Is(err, breaker.ErrOpen):
			s.DownRejected++
		case errors.Is(err, retry.ErrExhausted) && errors.Is(err, errUpstream):
			s.DownExhausted++
		default:
			return fmt.Errorf("down: unexpected error: %w", err)
		}
	}
	s.DownCalls = calls
	fmt.Fprintf(log, "down: %d calls, %d attempts reached the dependency: %d exhausted, %d rejected by the open breaker (state %v)\n",
		s.DownCalls, s.DownAttempts, s.DownExhausted, s.DownRejected, br.State())
	return nil
}

func shedPhase(ctx context.Context, _ trace.TracerProvider, mp metric.MeterProvider, cfg StormConfig, s *Storm, log io.Writer) error {
	bh, err := bulkhead.New(bulkhead.Config{Name: nameShed, Limit: 1, MaxQueue: 1, MeterProvider: mp})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, bh)
	release, held := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 3)
	run := func(ctx context.Context, work func(context.Context) error) {
		go func() { errs <- bh.Execute(ctx, work) }()
	}
	run(ctx, func(context.Context) error { close(held); <-release; return nil })
	<-held
	run(policy.WithPriority(ctx, policy.PrioritySheddable), func(ctx context.Context) error { return sleep(ctx, cfg.Work) })
	for bh.Queued() == 0 {
		// A ctx ended before the call queued would leave it out for good.
		if err := ctx.Err(); err != nil {
			close(release)
			return err
		}
		time.Sleep(time.Millisecond)
	}
	// The critical call takes the sheddable call's place in the queue.
	run(policy.WithPriority(ctx, policy.PriorityCritical), func(ctx context.Context) error { return sleep(ctx, cfg.Work) })
	if err := <-errs; !errors.Is(err, bulkhead.ErrFull) {
		return fmt.Errorf("shed: the sheddable call ended with %v, want a rejection", err)
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			return fmt.Errorf("shed: unexpected error: %w", err)
		}
	}
	s.ShedCalls, s.ShedOK, s.ShedRejected = 3, 2, 1
	fmt.Fprintf(log, "shed: %d calls into a bulkhead of 1 with a queue of 1, a critical call taking a sheddable one's place: %d ok, %d shed\n",
		s.ShedCalls, s.ShedOK, s.ShedRejected)
	return nil
}

func routedPhase(ctx context.Context, tp trace.TracerProvider, mp metric.MeterProvider, _ StormConfig, s *Storm, log io.Writer) error {
	r, err := route.New(route.Config{Name: nameRouted, ProbeInterval: 50 * time.Millisecond, MeterProvider: mp,
		Endpoints: []route.Endpoint{{Name: "eu"}, {Name: "us"}}})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, r)
	p, err := compose.New(nameRouted, compose.Policies{Route: r}, compose.WithTracerProvider(tp), compose.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	var euSlow atomic.Bool
	euSlow.Store(true)
	call := func() error {
		s.RoutedCalls++
		return p.Execute(ctx, func(ctx context.Context) error {
			ep, _ := route.EndpointOf(ctx)
			if ep.Name == "us" {
				s.RoutedUS++
				return sleep(ctx, time.Millisecond)
			}
			s.RoutedEU++
			if euSlow.Load() {
				return sleep(ctx, 150*time.Millisecond)
			}
			return sleep(ctx, time.Millisecond)
		})
	}
	for until := time.Now().Add(10 * time.Second); !r.Status()[0].Ejected; {
		if err := call(); err != nil || time.Now().After(until) {
			return fmt.Errorf("routed: eu not ejected after %d calls: %v", s.RoutedCalls, err)
		}
	}
	s.RoutedEjections = 1
	euSlow.Store(false)
	for until := time.Now().Add(10 * time.Second); r.Status()[0].Out; {
		if err := call(); err != nil || time.Now().After(until) {
			return fmt.Errorf("routed: eu not back after %d calls: %v", s.RoutedCalls, err)
		}
	}
	s.RoutedReturns = 1
	fmt.Fprintf(log, "routed: %d calls over eu and us: eu, slow, ejected and probed back once healed: %d to eu, %d to us\n",
		s.RoutedCalls, s.RoutedEU, s.RoutedUS)
	return nil
}
