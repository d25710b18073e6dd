package compose

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Pipeline runs calls through its policies in the fixed order described in
// the package documentation. Build one with [New] and share it: it is safe
// for concurrent use by multiple goroutines. The zero value is not usable.
type Pipeline struct {
	name   string
	stages []slot

	tracer      telemetry.Tracer
	spanName    string
	attemptName string
	spanOpts    []trace.SpanStartOption
	attemptOpts [][]trace.SpanStartOption // by attempt number - 1, prebuilt
	duration    metric.Float64Histogram
	okOpts      []metric.RecordOption
	errOpts     map[string][]metric.RecordOption // prebuilt at New, read-only
	moreOpts    sync.Map                         // error.type -> []metric.RecordOption, for types outside errOpts
	moreCount   atomic.Int32                     // entries in moreOpts, capped at maxMoreOpts
	pipelineKV  attribute.KeyValue

	// observer, if not nil, is the Bulkhead slot's policy, which learns
	// from the latency of each attempt (an adaptive limit): compose times
	// every attempt for it, in loop when a slot repeats (perAttempt), else
	// around everything below the Bulkhead slot.
	observer   stage.Observer
	perAttempt bool

	// suspends: a call can be suspended (see suspend.go).
	suspends bool
}

// slot is one filled slot of the pipeline, with the fastest way to run it
// found once at New.
type slot struct {
	policy   policy.Policy
	twoPhase stage.Stage    // non-nil: run in two phases
	repeater stage.Repeater // non-nil: compose drives the loop
}

var _ policy.Policy = (*Pipeline)(nil)

// New returns a Pipeline named name (used in span names and the
// watertight.pipeline.name attribute) over the policies in p. It returns an
// error if name is empty, if a slot holds a typed nil pointer or a
// *retry.Hedge, or if the Attempt timeout is longer than the Deadline's.
func New(name string, p Policies, opts ...Option) (*Pipeline, error) {
	if name == "" {
		return nil, errors.New("compose: name must not be empty")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	if err := p.checkLearners(); err != nil {
		return nil, err
	}
	o := pipeopt.Apply(opts)
	pl := &Pipeline{
		name:        name,
		tracer:      telemetry.NewTracer(o.TracerProvider),
		spanName:    "watertight " + name,
		attemptName: "watertight " + name + " attempt",
		pipelineKV:  telemetry.KeyPipeline.String(name),
	}
	for _, s := range p.slots() {
		if s.p == nil {
			continue
		}
		st := slot{policy: s.p}
		st.twoPhase, st.repeater = stage.Of(s.p)
		pl.stages = append(pl.stages, st)
		if st.repeater != nil {
			pl.perAttempt = true
		}
	}
	pl.suspends = canSuspend(pl.stages)
	// Only the outermost slot's policy is told the latencies (it is the
	// Bulkhead slot's, since p.Bulkhead comes first). It runs in two phases
	// even when it is the only slot, where the innermost policy would
	// otherwise run through its own Execute: compose's timing honours an
	// AnswerClock (the time to the response headers), the policy's own
	// Execute cannot.
	if p.Bulkhead != nil {
		pl.observer, _ = pl.stages[0].twoPhase.(stage.Observer)
	}
	pl.spanOpts = []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(pl.pipelineKV),
	}
	// Attempt spans carry their number; the options for the first few are
	// built here so that a traced attempt builds no attribute per call.
	for n := 1; n <= prebuiltAttempts; n++ {
		pl.attemptOpts = append(pl.attemptOpts, attemptOptions(n))
	}
	pl.duration = telemetry.NewInstruments(o.MeterProvider).CallDuration
	pl.okOpts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(pl.pipelineKV))}
	pl.errOpts = make(map[string][]metric.RecordOption)
	for _, t := range []string{telemetry.TypeRejected, telemetry.TypeTimeout, telemetry.TypeCanceled,
		telemetry.TypeExhausted, telemetry.TypeOther, telemetry.TypeAborted} {
		pl.errOpts[t] = pl.recordOptions(t)
	}
	return pl, nil
}

// maxMoreOpts caps the cache of record options for error types met after New.
const maxMoreOpts = 64

func (p *Pipeline) recordOptions(errorType string) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(p.pipelineKV, telemetry.KeyError.String(errorType)))}
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.name }

// Execute runs fn through the pipeline's policies and returns fn's error or
// the error of the policy that refused or cut the call (see the outcome table
// in the README). It panics if ctx or fn is nil. If fn panics, every policy
// frees what it holds and the panic propagates.
func (p *Pipeline) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("compose: nil Context")
	}
	if fn == nil {
		panic("compose: nil fn")
	}
	tr := p.tracer.Tracer()
	timed := p.duration.Enabled(ctx)
	if tr == nil && !timed {
		// Nothing to observe: no span, no clock reads.
		return p.run(ctx, 0, fn, nil)
	}
	return p.executeObserved(ctx, fn, tr, timed)
}

func (p *Pipeline) executeObserved(ctx context.Context, fn policy.Func, tr trace.Tracer, timed bool) (err error) {
	var start time.Time
	if timed {
		start = time.Now()
	}
	var span trace.Span
	if tr != nil {
		ctx, span = tr.Start(ctx, p.spanName, p.spanOpts...)
	}
	// finished stays false if fn panicked or called runtime.Goexit: the
	// span is then ended and the call recorded as aborted while the panic
	// goes on up.
	finished := false
	defer func() {
		if !finished {
			p.observe(ctx, span, start, timed, stage.ErrAborted)
		}
	}()
	// Attempt spans are started only while the call's span records.
	var attempts trace.Tracer
	if span != nil && span.IsRecording() {
		attempts = tr
	}
	err = p.run(ctx, 0, fn, attempts)
	finished = true
	p.observe(ctx, span, start, timed, err)
	return err
}

func (p *Pipeline) observe(ctx context.Context, span trace.Span, start time.Time, timed bool, err error) {
	var errType string
	if err != nil {
		errType = telemetry.ErrorType(err)
	}
	if timed {
		opts := p.okOpts
		if err != nil {
			var ok bool
			if opts, ok = p.errOpts[errType]; !ok {
				// Error types from user errors (an HTTP status, say) are
				// few but unknown at New: build each once.
				if v, found := p.moreOpts.Load(errType); found {
					opts = v.([]metric.RecordOption)
				} else {
					opts = p.recordOptions(errType)
					// Capped, so that an error type that is not the
					// low-cardinality value it should be cannot grow the
					// cache without bound.
					if p.moreCount.Load() < maxMoreOpts && p.moreCount.Add(1) <= maxMoreOpts {
						p.moreOpts.Store(errType, opts)
					}
				}
			}
		}
		p.duration.Record(ctx, time.Since(start).Seconds(), opts...)
	}
	if span != nil {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(telemetry.KeyError.String(errType))
		}
		span.End()
	}
}

// run executes stages[i:] around fn. The built-in policies run in two
// phases (see internal/stage); only a user-written policy that is not the
// innermost costs a closure. attempts, if not nil, starts a
// span per retry attempt.
func (p *Pipeline) run(ctx context.Context, i int, fn policy.Func, attempts trace.Tracer) error {
	if i == len(p.stages) {
		return fn(ctx)
	}
	st := &p.stages[i]
	switch {
	case i == len(p.stages)-1 && st.repeater == nil && (i > 0 || p.observer == nil):
		// The innermost policy wraps fn itself, which needs no closure:
		// its own Execute costs no more than its two phases (the
		// breaker's is those two phases).
		return st.policy.Execute(ctx, fn)
	case st.twoPhase != nil:
		return p.runStage(ctx, i, st.twoPhase, fn, attempts)
	case st.repeater != nil:
		return p.loop(ctx, i, st.repeater, fn, attempts)
	default:
		return st.policy.Execute(ctx, func(ctx context.Context) error {
			return p.run(ctx, i+1, fn, attempts)
		})
	}
}

func (p *Pipeline) runStage(ctx context.Context, i int, s stage.Stage, fn policy.Func, attempts trace.Tracer) error {
	inner, token, err := s.Enter(ctx)
	if err != nil {
		return err
	}
	// As in stage.Run: if anything below panics or calls runtime.Goexit,
	// finished stays false and the deferred Exit frees this stage's hold
	// (bulkhead slot, deadline timer, breaker probe) while the panic unwinds.
	finished := false
	defer func() {
		if !finished {
			s.Exit(inner, token, stage.ErrAborted)
		}
	}()
	if i == 0 && p.observer != nil && !p.perAttempt {
		err = p.runTimed(inner, i+1, fn, attempts)
	} else {
		err = p.run(inner, i+1, fn, attempts)
	}
	finished = true
	return s.Exit(inner, token, err)
}

// runTimed is run for one attempt whose latency the observer learns from:
// up to the moment the dependency answered, if an AnswerClock in ctx says
// so (httppolicy's streamed responses), else up to the attempt's end. A
// panic is not observed: the stage's Exit sees it.
func (p *Pipeline) runTimed(ctx context.Context, i int, fn policy.Func, attempts trace.Tracer) error {
	clock := stage.AnswerClockFrom(ctx)
	start := time.Now()
	if clock != nil {
		clock.Start(start)
	}
	err := p.run(ctx, i, fn, attempts)
	end := time.Now()
	d := end.Sub(start)
	if clock != nil {
		d = clock.Latency(end)
	}
	observe(p.observer, d, err)
	return err
}

// observe tells o the outcome of one attempt that took d. A success, and a
// timeout (a long latency is what a congested dependency shows), are
// latency samples; a rejection or the caller's cancellation says nothing
// about the dependency's latency and is not reported; any other error is a
// failure, which is not a latency sample: a dependency that fails fast must
// not look fast.
func observe(o stage.Observer, d time.Duration, err error) {
	switch {
	case err == nil:
		o.Observe(d, false)
	case errors.Is(err, policy.ErrRejected), errors.Is(err, context.Canceled):
	case errors.Is(err, context.DeadlineExceeded):
		o.Observe(d, false)
	default:
		o.Observe(d, true)
	}
}

// loop drives a Repeater as stage.Repeat does, and wraps each attempt in a
// child span if tr is not nil (the call's span is recording).
func (p *Pipeline) loop(ctx context.Context, i int, r stage.Repeater, fn policy.Func, tr trace.Tracer) error {
	return p.loopFrom(ctx, i, r, fn, tr, 1, nil)
}

// loopFrom is loop from attempt n0, with state the Repeater's state after
// attempt n0-1 (nil if n0 is 1).
func (p *Pipeline) loopFrom(ctx context.Context, i int, r stage.Repeater, fn policy.Func, tr trace.Tracer, n0 int, state stage.Token) error {
	for n := n0; ; n++ {
		actx := r.AttemptContext(ctx, n)
		var err error
		switch {
		case tr != nil:
			err = p.tracedAttempt(actx, tr, n, i+1, fn)
		case p.observer != nil:
			err = p.runTimed(actx, i+1, fn, nil)
		default:
			err = p.run(actx, i+1, fn, nil)
		}
		if err == nil {
			return nil
		}
		again, next, final := r.Next(ctx, n, err, state)
		if !again {
			return final
		}
		state = next
	}
}

// prebuiltAttempts is how many attempt numbers have their span options
// built at New.
const prebuiltAttempts = 8

func attemptOptions(n int) []trace.SpanStartOption {
	return []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(telemetry.KeyAttempt.Int(n)),
	}
}

func (p *Pipeline) tracedAttempt(ctx context.Context, tr trace.Tracer, n, i int, fn policy.Func) (err error) {
	var opts []trace.SpanStartOption
	if n <= len(p.attemptOpts) {
		opts = p.attemptOpts[n-1]
	} else {
		opts = attemptOptions(n)
	}
	ctx, span := tr.Start(ctx, p.attemptName, opts...)
	finished := false
	defer func() {
		if !finished {
			err = stage.ErrAborted
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(telemetry.KeyError.String(telemetry.ErrorType(err)))
		}
		span.End()
	}()
	if p.observer != nil {
		err = p.runTimed(ctx, i, fn, nil)
	} else {
		err = p.run(ctx, i, fn, nil)
	}
	finished = true
	return err
}
