package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/policy"
)

// Rejection is one way one policy refuses calls, prepared once at
// construction: the error value, the counter's attribute set and the span
// event's attributes. Recording it allocates nothing unless the span in ctx
// is recording.
type Rejection struct {
	Err     *policy.RejectedError
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

// NewRejection prepares the rejection of policy (kind, name) for reason,
// matching sentinel with errors.Is.
func NewRejection(in *Instruments, kind, name, reason string, sentinel error) *Rejection {
	kv := []attribute.KeyValue{KeyKind.String(kind), KeyName.String(name), KeyReason.String(reason)}
	return &Rejection{
		Err:     policy.NewRejectedError(kind, name, reason, sentinel),
		counter: in.Rejections,
		opts:    AddOptions(kv...),
		event:   kv,
	}
}

// Record counts the rejection, adds a watertight.rejected event to the span
// in ctx if it is recording, and returns the rejection's error.
func (r *Rejection) Record(ctx context.Context) error {
	r.counter.Add(ctx, 1, r.opts...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(EventRejected, trace.WithAttributes(r.event...))
	}
	return r.Err
}

// Timeout is the timeout record of one deadline policy, prepared once.
type Timeout struct {
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

// NewTimeout prepares the timeout record of policy (kind, name).
func NewTimeout(in *Instruments, kind, name string) *Timeout {
	kv := PolicyAttrs(kind, name)
	return &Timeout{counter: in.Timeouts, opts: AddOptions(kv...), event: kv}
}

// Record counts the timeout and adds a watertight.timeout event to the span
// in ctx if it is recording.
func (t *Timeout) Record(ctx context.Context) {
	t.counter.Add(ctx, 1, t.opts...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(EventTimeout, trace.WithAttributes(t.event...))
	}
}
