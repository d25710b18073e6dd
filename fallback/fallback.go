package fallback

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// Kind is the watertight.policy.kind of the fallback telemetry.
const Kind = "fallback"

// Alternative is one way to get the answer. Name and Fn are required.
type Alternative[T any] struct {
	// Name names the alternative in errors and telemetry. Keep its
	// cardinality low, such as a provider's name.
	Name string
	// Policy runs Fn, usually the provider's pipeline. Nil runs Fn
	// directly.
	Policy policy.Policy
	// Fn makes the call. It must honour ctx, and call [MarkDelivered] with
	// it once it has handed any part of its answer on.
	Fn func(ctx context.Context) (T, error)
}

// Config configures [Do]. The zero value is valid.
type Config struct {
	// Name names the chain in telemetry. Empty is allowed.
	Name string

	// ShouldFallback reports whether a failure should move the call on to
	// the next alternative. Nil means [DefaultShouldFallback]. The
	// caller's cancellation, and a failure after MarkDelivered, never
	// move on. It may be called concurrently.
	ShouldFallback func(err error) bool

	// MeterProvider provides the counter. Nil means the global provider.
	MeterProvider metric.MeterProvider

	// OnFallback, if set, is called on the caller's goroutine before each
	// move: alternative from failed with err, and to runs next.
	OnFallback func(ctx context.Context, from, to string, err error)
}

// DefaultShouldFallback moves on after a rejection ([policy.ErrRejected]),
// a watertight timeout ([policy.ErrTimeout]), an exhausted retry
// ([retry.ErrExhausted]), a throttled answer ([policy.ErrThrottled]) or a
// spent quota ([policy.ErrQuotaSpent]).
func DefaultShouldFallback(err error) bool {
	return errors.Is(err, policy.ErrRejected) ||
		errors.Is(err, policy.ErrTimeout) ||
		errors.Is(err, retry.ErrExhausted) ||
		errors.Is(err, policy.ErrThrottled) ||
		errors.Is(err, policy.ErrQuotaSpent)
}

// Why [Do] stopped, in [Error].Stop.
const (
	StopExhausted  = "exhausted"   // every alternative failed
	StopNoFallback = "no_fallback" // ShouldFallback refused the last failure
	StopCanceled   = "canceled"    // the caller's context ended
	StopDelivered  = "delivered"   // the last failure came after MarkDelivered
)

// ErrFailed is matched by every [*Error].
var ErrFailed = errors.New("fallback: no alternative succeeded")

// Tried is one alternative that ran and failed.
type Tried struct {
	Name string
	Err  error // never nil
}

// Error is the error of a [Do] in which no alternative succeeded. It
// matches [ErrFailed] and unwraps to every tried alternative's error. It
// is not modified once returned.
type Error struct {
	Name    string  // Config.Name
	Tried   []Tried // the alternatives that ran, in order
	Untried int     // the alternatives that never ran
	Stop    string  // one of the Stop constants
	Cause   error   // the caller's context's cause, with StopCanceled
}

// Error returns a message such as `fallback: all 2 alternatives failed:
// openai: <err>; anthropic: <err>`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(telemetry.Label("fallback", e.Name))
	switch e.Stop {
	case StopExhausted:
		fmt.Fprintf(&b, ": all %d alternatives failed", len(e.Tried))
	case StopNoFallback:
		b.WriteString(": stopped on a failure that does not fall back")
	case StopCanceled:
		b.WriteString(": canceled")
		if e.Cause != nil {
			b.WriteString(" (" + e.Cause.Error() + ")")
		}
	case StopDelivered:
		b.WriteString(": failed after delivering part of the answer")
	}
	if e.Untried > 0 {
		fmt.Fprintf(&b, ", %d untried", e.Untried)
	}
	sep := ": "
	for _, t := range e.Tried {
		b.WriteString(sep + t.Name + ": " + t.Err.Error())
		sep = "; "
	}
	return b.String()
}

// Unwrap returns the tried alternatives' errors, and Cause if set.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, len(e.Tried)+1)
	for _, t := range e.Tried {
		errs = append(errs, t.Err)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// Is reports whether target is [ErrFailed].
func (e *Error) Is(target error) bool { return target == ErrFailed }

// ErrorType returns "fallback_failed".
func (e *Error) ErrorType() string { return "fallback_failed" }

type deliveredKey struct{}

// MarkDelivered records that the fn running with ctx under [Do] has
// handed part of its answer on. It may be called more than once, from any
// goroutine. It does nothing if ctx does not come from Do.
func MarkDelivered(ctx context.Context) {
	if d, ok := ctx.Value(deliveredKey{}).(*atomic.Bool); ok {
		d.Store(true)
	}
}

// Delivered reports whether MarkDelivered was called in the alternative
// run that ctx belongs to.
func Delivered(ctx context.Context) bool {
	d, ok := ctx.Value(deliveredKey{}).(*atomic.Bool)
	return ok && d.Load()
}

// Do runs alts in order and returns the value of the first that succeeds.
// It returns an error without running any if alts is empty, or if one has
// an empty Name or a nil Fn. A panic in an alternative goes on up. Do
// panics if ctx is nil.
func Do[T any](ctx context.Context, cfg Config, alts []Alternative[T]) (T, error) {
	var zero T
	if ctx == nil {
		panic("fallback: nil Context")
	}
	if len(alts) == 0 {
		return zero, errors.New("fallback: no alternatives")
	}
	for i, a := range alts {
		if a.Name == "" {
			return zero, fmt.Errorf("fallback: alternatives[%d].Name is empty", i)
		}
		if a.Fn == nil {
			return zero, fmt.Errorf("fallback: alternatives[%d].Fn (%q) is nil", i, a.Name)
		}
	}
	should := cfg.ShouldFallback
	if should == nil {
		should = DefaultShouldFallback
	}
	fail := &Error{Name: cfg.Name}
	for i, a := range alts {
		fail.Untried = len(alts) - i
		if ctx.Err() != nil {
			fail.Stop, fail.Cause = StopCanceled, context.Cause(ctx)
			return zero, fail
		}
		v, err, delivered := run(ctx, a)
		if err == nil {
			return v, nil
		}
		fail.Tried = append(fail.Tried, Tried{Name: a.Name, Err: err})
		fail.Untried--
		switch {
		case delivered:
			fail.Stop = StopDelivered
		case ctx.Err() != nil:
			fail.Stop, fail.Cause = StopCanceled, context.Cause(ctx)
		case i == len(alts)-1:
			fail.Stop = StopExhausted
		case !should(err):
			fail.Stop = StopNoFallback
		}
		if fail.Stop != "" {
			return zero, fail
		}
		record(ctx, cfg, a.Name, alts[i+1].Name, err)
		if cfg.OnFallback != nil {
			cfg.OnFallback(ctx, a.Name, alts[i+1].Name, err)
		}
	}
	panic("unreachable")
}

// run runs one alternative, with a delivery mark in its ctx.
func run[T any](ctx context.Context, a Alternative[T]) (v T, err error, delivered bool) {
	d := new(atomic.Bool)
	ctx = context.WithValue(ctx, deliveredKey{}, d)
	if a.Policy == nil {
		v, err = a.Fn(ctx)
		return v, err, err != nil && d.Load()
	}
	v, err = policy.Do(ctx, a.Policy, func(ctx context.Context) (T, error) {
		v, err := a.Fn(ctx)
		if err != nil && d.Load() {
			return v, policy.Permanent(err)
		}
		return v, err
	})
	err = policy.Unmark(err)
	return v, err, err != nil && d.Load()
}

// record counts a move from alternative from to alternative to after err,
// and adds a span event.
func record(ctx context.Context, cfg Config, from, to string, err error) {
	kv := []attribute.KeyValue{
		telemetry.KeyKind.String(Kind), telemetry.KeyName.String(cfg.Name),
		attribute.String("watertight.fallback.from", from), attribute.String("watertight.fallback.to", to),
		attribute.String("watertight.fallback.reason", telemetry.ErrorType(err)),
	}
	c := telemetry.Counter(telemetry.MeterOf(cfg.MeterProvider), "watertight.fallbacks", "{call}",
		"Calls moved from one alternative to the next, by the failure that moved them.")
	c.Add(ctx, 1, metric.WithAttributes(kv...))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("watertight.fallback", trace.WithAttributes(kv...))
	}
}
