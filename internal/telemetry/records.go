package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/slots"
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
	Err      *policy.RejectedError
	rec      [3]record // by the rejected call's priority, lowest first
	onReject func(ctx context.Context, err *policy.RejectedError)
}

// Rejecter prepares the rejections of policy (Kind, Name), whose Record
// calls OnReject, if not nil.
type Rejecter struct {
	In         *Instruments
	Kind, Name string
	OnReject   func(ctx context.Context, err *policy.RejectedError)
}

// New prepares the rejection for reason, matching sentinel with
// errors.Is. A call of a priority other than the default is counted with
// the watertight.priority attribute.
func (p Rejecter) New(reason string, sentinel error) *Rejection {
	r := &Rejection{Err: policy.NewRejectedError(p.Kind, p.Name, reason, sentinel), onReject: p.OnReject}
	kv := []attribute.KeyValue{KeyKind.String(p.Kind), KeyName.String(p.Name), KeyReason.String(reason)}
	for i := range r.rec {
		if pr := policy.Priority(i - 1); pr == policy.PriorityDefault {
			r.rec[i] = newRecord(p.In.Rejections, kv...)
		} else {
			r.rec[i] = newRecord(p.In.Rejections, append(kv[:3:3], KeyPriority.String(pr.String()))...)
		}
	}
	return r
}

// Record counts the rejection with the priority of ctx, adds a
// watertight.rejected event to the span in ctx if it is recording, passes
// r.Err to the OnReject hook of its [Rejecter], if any, and returns r.Err.
// Call it with no lock held: the hook is user code.
func (r *Rejection) Record(ctx context.Context) error {
	r.rec[policy.PriorityOf(ctx)+1].add(ctx, EventRejected)
	if r.onReject != nil {
		r.onReject(ctx, r.Err)
	}
	return r.Err
}

// SlotRejections are the rejections of a policy that admits calls through
// package slots.
type SlotRejections struct{ full, waitTimeout, shed, keyFull *Rejection }

// Slots prepares the full, wait_timeout, shed and key_full rejections,
// each matching sentinel.
func (p Rejecter) Slots(sentinel error) SlotRejections {
	return SlotRejections{
		full:        p.New(ReasonFull, sentinel),
		waitTimeout: p.New(ReasonWaitTimeout, sentinel),
		shed:        p.New(ReasonShed, sentinel),
		keyFull:     p.New(ReasonKeyFull, sentinel),
	}
}

// Refused returns the error of a [slots.Slots.Acquire] that ended with o
// and err: err if o is not a rejection, else the rejection, recorded.
func (r *SlotRejections) Refused(ctx context.Context, o slots.Outcome, err error) error {
	switch o {
	case slots.RejectedFull:
		return r.full.Record(ctx)
	case slots.RejectedWaitTimeout:
		return r.waitTimeout.Record(ctx)
	case slots.RejectedShed:
		return r.shed.Record(ctx)
	case slots.RejectedKeyFull:
		return r.keyFull.Record(ctx)
	}
	return err
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
