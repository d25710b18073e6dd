package compose

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// Pipeline runs calls through its policies in the fixed order described in
// the package documentation. Build one with [New] and share it: it is safe
// for concurrent use by multiple goroutines. The zero value is not usable.
type Pipeline struct {
	name  string
	pols  Policies
	slots []slot
	// routed holds, per endpoint of a Route slot (the last), the slots
	// with the endpoint's own after it.
	routed [][]slot
	// retries: a Retry is in a slot; below it each attempt gets a span.
	retries bool

	tracer      telemetry.Tracer
	spanName    string
	attemptName string
	spanOpts    []trace.SpanStartOption
	duration    metric.Float64Histogram
	okOpts      []metric.RecordOption
	errOpts     map[string][]metric.RecordOption // the common error types', read-only
	pipelineKV  attribute.KeyValue

	counting atomic.Bool // CountRejections was called
	rejected sync.Map    // *policy.RejectedError (one per policy and reason) -> *atomic.Int64
}

// slot is one filled slot of the pipeline, or the point where an attempt
// starts (kindAttempt).
type slot struct {
	policy policy.Policy
	kind   kind
	router *route.Router // kindRoute
}

// kind says how a call enters a slot: a policy of this module in two
// steps (a Retry as a Loop), anything else through its Execute.
type kind uint8

const (
	kindExecute kind = iota
	kindBulkhead
	kindAdaptive
	kindDeadline
	kindRateLimit
	kindBreaker
	kindRetry
	kindRoute   // the pick of an endpoint
	kindKeyed   // the policy of the call's key, held (keyed.Group)
	kindAttempt // an attempt's span and latency sample
	kindCall    // the call's span and duration
)

// kindOf finds the built-in policies, a closed set, by their types.
func kindOf(p policy.Policy) kind {
	switch p.(type) {
	case *bulkhead.Bulkhead:
		return kindBulkhead
	case *adaptive.Limiter:
		return kindAdaptive
	case *deadline.Deadline:
		return kindDeadline
	case *ratelimit.Limiter:
		return kindRateLimit
	case *breaker.Breaker:
		return kindBreaker
	case *retry.Retry:
		return kindRetry
	case *keyed.Group:
		return kindKeyed
	}
	return kindExecute
}

var _ policy.Policy = (*Pipeline)(nil)

// New returns a Pipeline named name (used in span names and the
// watertight.pipeline.name attribute) over the policies in p. It returns an
// error if name is empty, if a slot holds a typed nil pointer or an
// adaptive limit outside the Bulkhead slot, or if the Attempt timeout is
// longer than the Deadline's.
func New(name string, p Policies, opts ...Option) (*Pipeline, error) {
	if name == "" {
		return nil, errors.New("compose: name must not be empty")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	o := pipeopt.Apply(opts)
	pl := &Pipeline{
		name:        name,
		pols:        p,
		tracer:      telemetry.NewTracer(o.TracerProvider),
		spanName:    "watertight " + name,
		attemptName: "watertight " + name + " attempt",
		pipelineKV:  telemetry.KeyPipeline.String(name),
	}
	pl.slots = p.build()
	if p.Route != nil {
		pl.routed = p.routed(pl.slots, len(pl.slots)-1)
	}
	for _, s := range pl.slots {
		pl.retries = pl.retries || s.kind == kindRetry
	}
	pl.spanOpts = []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(pl.pipelineKV),
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

func (p *Pipeline) recordOptions(errorType string) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(p.pipelineKV, telemetry.KeyError.String(errorType)))}
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.name }

// Policies returns the policies in the pipeline's slots, as New was given
// them.
func (p *Pipeline) Policies() Policies { return p.pols }

// Execute runs fn through the pipeline's policies and returns fn's error or
// the error of the policy that refused or cut the call (see the outcome table
// in the README). It panics if ctx or fn is nil. If fn panics, every policy
// frees what it holds and the panic propagates.
func (p *Pipeline) Execute(ctx context.Context, fn policy.Func) error {
	if fn == nil {
		panic("compose: nil fn")
	}
	_, err := p.run(ctx, fn, false)
	return err
}

// ErrHandOver is returned by the fn given to [Pipeline.Start] to hand the
// call over: the call is not over, and its outcome comes later, through
// [Held.End]. Execute treats it as any other error.
var ErrHandOver = errors.New("compose: call handed over")

// Start runs fn through the pipeline as Execute does, for a call that may
// outlive Start (see Hand-over in the package documentation). If fn
// returns [ErrHandOver], Start returns a non-nil [*Held] and a nil error at
// once, and every policy keeps what it holds (the bulkhead slot, the
// deadline's context, the breaker's verdict) until Held.End. Otherwise it
// returns nil and the call's error. A panic in a policy of another package
// goes on up Start's caller before the hand-over, and up End's after. It
// panics if ctx or fn is nil.
func (p *Pipeline) Start(ctx context.Context, fn policy.Func) (*Held, error) {
	if fn == nil {
		panic("compose: nil fn")
	}
	return p.run(ctx, fn, true)
}

func (p *Pipeline) run(ctx context.Context, fn policy.Func, mayHand bool) (*Held, error) {
	if ctx == nil {
		panic("compose: nil Context")
	}
	c := &call{p: p, fn: fn, mayHand: mayHand, slots: p.slots}
	tr := p.tracer.Tracer()
	timed := p.duration.Enabled(ctx)
	if tr == nil && !timed {
		// Nothing to observe: no span, no clock reads.
		err := c.from(ctx, 0)
		return c.held(err)
	}
	c.timed = timed
	if timed {
		c.start = time.Now()
	}
	if tr != nil {
		ctx, c.span = tr.Start(ctx, p.spanName, p.spanOpts...)
		// Attempt spans are started only while the call's span records.
		if c.span.IsRecording() {
			c.attempts = tr
		}
	}
	c.ctx = ctx
	// The call's own frame: its telemetry ends as a slot's hold does.
	x := exit{kind: kindCall}
	err := c.under(ctx, -1, &x)
	return c.held(err)
}

// held returns the outcome of a run: the call handed over, or its error.
// A handed-over call's state moves to the heap, to outlive the run.
func (c *call) held(err error) (*Held, error) {
	if err != nil && c.p.counting.Load() {
		c.p.count(err)
	}
	if c.handed {
		h := new(call)
		*h = *c
		return &Held{c: h}, nil
	}
	return nil, err
}

func (p *Pipeline) observe(ctx context.Context, span trace.Span, start time.Time, timed bool, err error) {
	if timed {
		opts := p.okOpts
		if err != nil {
			var ok bool
			errType := telemetry.ErrorType(err)
			if opts, ok = p.errOpts[errType]; !ok {
				opts = p.recordOptions(errType)
			}
		}
		p.duration.Record(ctx, time.Since(start).Seconds(), opts...)
	}
	if span != nil {
		endSpan(span, err)
	}
}
