package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/policy"
)

// record is a counter increment and a span event, prepared once.
type record struct {
	counter metric.Int64Counter
	opts    []metric.AddOption
	event   []attribute.KeyValue
}

func newRecord(counter metric.Int64Counter, kv ...attribute.KeyValue) record {
	return record{counter: counter, opts: AddOptions(kv...), event: kv}
}

// add counts one and adds the event name to the span in ctx if it is
// recording. It allocates nothing unless the span is recording.
func (r *record) add(ctx context.Context, name string) {
	r.counter.Add(ctx, 1, r.opts...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(r.event...))
	}
}

// Rejection is one way one policy refuses calls, prepared once.
type Rejection struct {
	Err *policy.RejectedError
	rec [3]record // by the rejected call's priority, lowest first
}

// NewRejection prepares the rejection of policy (kind, name) for reason,
// matching sentinel with errors.Is. A call of a priority other than the
// default is counted with the watertight.priority attribute.
func NewRejection(in *Instruments, kind, name, reason string, sentinel error) *Rejection {
	r := &Rejection{Err: policy.NewRejectedError(kind, name, reason, sentinel)}
	kv := []attribute.KeyValue{KeyKind.String(kind), KeyName.String(name), KeyReason.String(reason)}
	for i := range r.rec {
		if p := policy.Priority(i - 1); p == policy.PriorityDefault {
			r.rec[i] = newRecord(in.Rejections, kv...)
		} else {
			r.rec[i] = newRecord(in.Rejections, append(kv[:3:3], KeyPriority.String(p.String()))...)
		}
	}
	return r
}

// Record counts the rejection with the priority of ctx, adds a
// watertight.rejected event to the span in ctx if it is recording, and
// returns r.Err.
func (r *Rejection) Record(ctx context.Context) error {
	r.rec[policy.PriorityOf(ctx)+1].add(ctx, EventRejected)
	return r.Err
}

// Timeout is the timeout record of one deadline policy, prepared once.
type Timeout struct{ rec record }

// NewTimeout prepares the timeout record of policy (kind, name).
func NewTimeout(in *Instruments, kind, name string) *Timeout {
	return &Timeout{rec: newRecord(in.Timeouts, PolicyAttrs(kind, name)...)}
}

// Record counts the timeout and adds a watertight.timeout event to the span
// in ctx if it is recording.
func (t *Timeout) Record(ctx context.Context) { t.rec.add(ctx, EventTimeout) }
