package main

import (
	"context"
	"crypto/rand"
	"errors"
	"net"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/watertight/watertight/fallback"
)

// Assistant asks its Primary provider, else its Secondary: "OpenAI, else
// Anthropic". Each provider keeps its own pipeline (in its SDK's HTTP
// client); fallback.Do moves from one to the next when [ShouldFallback]
// says another provider may do better, and never after part of a streamed
// answer was delivered. It is safe for concurrent use.
type Assistant struct {
	Primary, Secondary Chat
	// OnFallback, if set, is called at each move from one provider to the
	// next, with the failure that caused it.
	OnFallback func(from, to string, err error)
}

func (a *Assistant) config() fallback.Config {
	cfg := fallback.Config{Name: "assistant", ShouldFallback: ShouldFallback}
	if a.OnFallback != nil {
		cfg.OnFallback = func(_ context.Context, from, to string, err error) { a.OnFallback(from, to, err) }
	}
	return cfg
}

func (a *Assistant) alternatives(fn func(context.Context, Chat) (string, error)) []fallback.Alternative[string] {
	return []fallback.Alternative[string]{
		{Name: "openai", Fn: func(ctx context.Context) (string, error) { return fn(ctx, a.Primary) }},
		{Name: "anthropic", Fn: func(ctx context.Context) (string, error) { return fn(ctx, a.Secondary) }},
	}
}

// Complete asks for a whole answer.
func (a *Assistant) Complete(ctx context.Context, prompt string) (string, error) {
	return fallback.Do(ctx, a.config(), a.alternatives(func(ctx context.Context, c Chat) (string, error) {
		return c.Complete(ctx, prompt)
	}))
}

// Stream asks for a streamed answer, calling onDelta with each piece. Once
// a piece was delivered, a failure ends the call: the other provider would
// start the answer again.
func (a *Assistant) Stream(ctx context.Context, prompt string, onDelta func(string)) (string, error) {
	return fallback.Do(ctx, a.config(), a.alternatives(func(ctx context.Context, c Chat) (string, error) {
		return c.Stream(ctx, prompt, onDelta)
	}))
}

// ShouldFallback classifies a provider's failure for fallback.Do. The
// httppolicy.Transport hands the SDK the last failure response (a 503, a
// 429 whose retries ran out) with a nil error, and the SDK turns it into
// its own error type: a status of 408, 429 or 5xx moves on (the next
// provider may well answer), as does a 402 (this provider's credit is
// spent: the next one's may not be); any other 4xx does not (the request
// itself is wrong: the next provider would refuse it too). Without a status, it
// moves on after a connection error and whatever
// fallback.DefaultShouldFallback moves on for (a rejection by a policy, a
// watertight timeout, an exhausted retry). The caller's own cancellation
// never moves on: Do checks it first.
func ShouldFallback(err error) bool {
	if s := statusCode(err); s != 0 {
		return s == 402 || s == 408 || s == 429 || s >= 500
	}
	var oe *net.OpError // refused, reset, unreachable
	return errors.As(err, &oe) || fallback.DefaultShouldFallback(err)
}

// statusCode returns the HTTP status of an SDK's API error, or 0.
func statusCode(err error) int {
	if e, ok := errors.AsType[*openai.Error](err); ok {
		return e.StatusCode
	}
	if e, ok := errors.AsType[*anthropic.Error](err); ok {
		return e.StatusCode
	}
	return 0
}

// newKey returns a fresh Idempotency-Key: one per call, shared by the
// call's attempts (the header is set once, on the request the SDK builds).
func newKey() string { return rand.Text() }
