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

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// Kind is the watertight.policy.kind of the fallback telemetry.
const Kind = "fallback"

// Alternative is one way to get the answer: a provider, with the policy
// that guards calls to it. The zero value is not usable: Name and Fn are
// required.
type Alternative[T any] struct {
	// Name names the alternative in errors and telemetry
	// (watertight.fallback.from and .to): keep it low in cardinality, such
	// as the provider's name. It must not be empty.
	Name string
	// Policy runs Fn (usually the provider's watertight pipeline). Nil
	// runs Fn directly.
	Policy policy.Policy
	// Fn makes the call. It must honour ctx, and call [MarkDelivered] with
	// it once it has handed any part of its answer on.
	Fn func(ctx context.Context) (T, error)
}

// Config configures [Do]. The zero value is valid: no name, the default
// classification, the global MeterProvider, no hook. A Config is read by
// each call of Do and not kept.
type Config struct {
	// Name names this chain of alternatives in telemetry
	// (watertight.policy.name). Empty is allowed.
	Name string

	// ShouldFallback reports whether a failure err (never nil) of one
	// alternative should move the call on to the next. Nil means
	// [DefaultShouldFallback]. Whatever it says, the caller's cancellation
	// (ctx done) never moves on, and neither does a failure after fn
	// called MarkDelivered. It may be called concurrently.
	ShouldFallback func(err error) bool

	// MeterProvider provides the watertight.fallbacks counter. Nil means
	// the global MeterProvider.
	MeterProvider metric.MeterProvider

	// OnFallback, if not nil, is called before each move, on the caller's
	// goroutine: alternative from failed with err, and to runs next.
	OnFallback func(ctx context.Context, from, to string, err error)
}

// DefaultShouldFallback is the classification used when
// [Config.ShouldFallback] is nil. It moves on after a rejection
// ([policy.ErrRejected]), a watertight timeout ([deadline.ErrExceeded],
// httppolicy's stream timeouts included), an exhausted retry
// ([retry.ErrExhausted]) or a throttled answer ([policy.ErrThrottled]).
// Anything else, such as a bad request or the caller's own context errors,
// does not move on. It is safe for concurrent use.
func DefaultShouldFallback(err error) bool {
	return errors.Is(err, policy.ErrRejected) ||
		errors.Is(err, deadline.ErrExceeded) ||
		errors.Is(err, retry.ErrExhausted) ||
		errors.Is(err, policy.ErrThrottled)
}

// Why [Do] stopped, in [Error.Stop].
const (
	// StopExhausted: every alternative was tried and failed.
	StopExhausted = "exhausted"
	// StopNoFallback: ShouldFallback said the last failure must not move
	// on.
	StopNoFallback = "no_fallback"
	// StopCanceled: the caller's context ended.
	StopCanceled = "canceled"
	// StopDelivered: the last alternative failed after delivering part of
	// its answer.
	StopDelivered = "delivered"
)

// ErrFailed is matched, with errors.Is, by every [*Error].
var ErrFailed = errors.New("fallback: no alternative succeeded")

// Tried is one alternative that ran and failed.
type Tried struct {
	// Name is the alternative's name.
	Name string
	// Err is its error (never nil).
	Err error
}

// Error is the error of a [Do] in which no alternative succeeded. It
// matches [ErrFailed], unwraps to every tried alternative's error, and is
// not modified after Do returns it, so it may be read concurrently.
type Error struct {
	// Name is Config.Name.
	Name string
	// Tried lists the alternatives that ran, in order; the last one's
	// failure ended the call. It is empty if the caller's context had
	// ended before the first one.
	Tried []Tried
	// Untried is the number of alternatives that never ran.
	Untried int
	// Stop says why Do stopped: StopExhausted, StopNoFallback,
	// StopCanceled or StopDelivered.
	Stop string
	// Cause is the caller's context error for StopCanceled, else nil.
	Cause error
}

// Error returns a message such as `fallback: 2 alternatives failed:
// openai: <err>; anthropic: <err>`, naming why it stopped when not every
// alternative was tried.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("fallback")
	if e.Name != "" {
		fmt.Fprintf(&b, " %q", e.Name)
	}
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
	for i, t := range e.Tried {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(t.Name + ": " + t.Err.Error())
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

// ErrorType returns "fallback_failed", its error.type.
func (e *Error) ErrorType() string { return "fallback_failed" }

type deliveredKey struct{}

// delivery is the mark MarkDelivered sets, one per alternative run.
type delivery struct{ done atomic.Bool }

// MarkDelivered records that the fn running with ctx under [Do] has handed
// part of its answer on. If it fails after this, Do does not fall back,
// and the alternative's own retry does not retry it. It is safe to call
// more than once, from any goroutine, and does nothing if ctx does not
// come from Do.
func MarkDelivered(ctx context.Context) {
	if d, ok := ctx.Value(deliveredKey{}).(*delivery); ok {
		d.done.Store(true)
	}
}

// Delivered reports whether MarkDelivered was called with ctx (or a
// context of the same alternative run).
func Delivered(ctx context.Context) bool {
	d, ok := ctx.Value(deliveredKey{}).(*delivery)
	return ok && d.done.Load()
}

// Do runs alts in order and returns the value of the first that succeeds;
// see the package documentation. It returns an error, without running any
// alternative, if alts is empty or one of them has an empty Name or a nil
// Fn; the error names it. Do panics if ctx is nil. A panic in an alternative goes
// on up, and no later alternative runs.
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
		if err := ctx.Err(); err != nil {
			fail.Stop, fail.Cause, fail.Untried = StopCanceled, context.Cause(ctx), len(alts)-i
			return zero, fail
		}
		v, err, delivered := run(ctx, a)
		if err == nil {
			return v, nil
		}
		fail.Tried = append(fail.Tried, Tried{Name: a.Name, Err: err})
		fail.Untried = len(alts) - i - 1
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
		next := alts[i+1].Name
		record(ctx, cfg, a.Name, next, err)
		if cfg.OnFallback != nil {
			cfg.OnFallback(ctx, a.Name, next, err)
		}
	}
	panic("unreachable")
}

// run runs one alternative, with a delivery mark in its ctx; a failure
// after delivery is marked permanent for the alternative's policy.
func run[T any](ctx context.Context, a Alternative[T]) (v T, err error, delivered bool) {
	d := new(delivery)
	ctx = context.WithValue(ctx, deliveredKey{}, d)
	if a.Policy == nil {
		v, err = a.Fn(ctx)
		return v, err, err != nil && d.done.Load()
	}
	v, err = policy.Do(ctx, a.Policy, func(ctx context.Context) (T, error) {
		v, err := a.Fn(ctx)
		if err != nil && d.done.Load() {
			// Not even the alternative's own retry may repeat it.
			return v, retry.Permanent(err)
		}
		return v, err
	})
	if err != nil {
		err = retry.Unmark(err)
	}
	return v, err, err != nil && d.done.Load()
}

// record counts one move from alternative from to alternative to after
// err, and adds a span event.
func record(ctx context.Context, cfg Config, from, to string, err error) {
	kv := []attribute.KeyValue{
		telemetry.KeyKind.String(Kind), telemetry.KeyName.String(cfg.Name),
		keyFrom.String(from), keyTo.String(to), keyReason.String(telemetry.ErrorType(err)),
	}
	counter(cfg.MeterProvider).Add(ctx, 1, metric.WithAttributes(kv...))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventFallback, trace.WithAttributes(kv...))
	}
}
