package main

import (
	"context"
	"net"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

// Limits sizes the pipeline that guards one provider.
type Limits struct {
	Slots     int           // calls in flight at once; also the connection cap
	Queue     int           // calls that may wait for a slot; 0 rejects at once
	QueueWait time.Duration // longest wait for a slot (0: the caller's ctx)

	// CallTimeout bounds the whole call: every attempt, every wait between
	// them, and the reading of a stream.
	CallTimeout time.Duration
	// AttemptTimeout, if set, bounds one attempt. httppolicy keeps the
	// attempt open while the body is read, so it bounds a stream too: it
	// must cover the longest answer you accept. For streams, leave it 0 and
	// rely on FirstByte and Idle, which watch the stream itself.
	AttemptTimeout time.Duration

	// FirstByte bounds each attempt's wait for the first event of the
	// answer (keepalives do not count): a late one fails the attempt, which
	// is retried. Idle bounds each wait for the next event once the stream
	// is handed over: a stall fails the call, which is not retried (the
	// caller has part of the answer). 0 turns either off.
	FirstByte time.Duration
	Idle      time.Duration

	// StreamEnd is the provider's terminal event: a stream that ends
	// without it was cut, and its reader gets an error, not a clean end.
	// NewOpenAI and NewAnthropic set their provider's.
	StreamEnd *httppolicy.StreamEnd

	// NoThrottle leaves out the RateLimit section: without it, the
	// provider's Retry-After and x-ratelimit-* / anthropic-ratelimit-*
	// headers hold every call's attempts while the quota is spent.
	NoThrottle bool

	Attempts int           // tries in all, the first included
	Backoff  time.Duration // first wait when the server names none
	MaxWait  time.Duration // longest wait; a longer Retry-After gives up at once

	TripAfter uint32        // consecutive failed attempts that open the breaker
	OpenFor   time.Duration // how long it stays open before a probe

	// Dial, if set, opens the connections to the provider in place of the
	// default dialer (a proxy, or a test's in-memory network: Fake.Dial).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	// OnRetry and OnState, if set, report retries and breaker changes.
	OnRetry func(attempt int, err error, wait time.Duration)
	OnState func(from, to breaker.State)
}

// DefaultLimits are sensible limits for a chat provider: 8 calls at once, 16
// more waiting up to 2s, 120s for a whole call (streams included), 15s for
// the first token and 30s between tokens (keepalives do not count), 3
// tries, waits of at most 10s (a longer hold or Retry-After gives up at
// once), and a breaker that opens after 5 failures in a row for 10s.
func DefaultLimits() Limits {
	return Limits{
		Slots: 8, Queue: 16, QueueWait: 2 * time.Second,
		CallTimeout: 120 * time.Second,
		FirstByte:   15 * time.Second, Idle: 30 * time.Second,
		Attempts: 3, Backoff: 200 * time.Millisecond, MaxWait: 10 * time.Second,
		TripAfter: 5, OpenFor: 10 * time.Second,
	}
}

// NewGuard builds the pipeline named name, outermost first: bulkhead,
// deadline (whole call), retry, rate limit (fed by the provider's
// headers), breaker, attempt deadline (if set), and the HTTP client that
// runs every request of a provider's SDK through it, with the first-byte
// and idle timeouts, over a connection pool capped at the bulkhead's
// limit. Each provider gets its own, so one provider's trouble fills its
// own bulkhead, holds its own attempts and trips its own breaker, and no
// other's.
//
// A 429 is retried (after the hold its headers set) but is not a breaker
// failure: it is the provider's flow control, not a broken provider. A 5xx
// and both stream timeouts are failures.
func NewGuard(name string, l Limits) (*watertight.Client, error) {
	rcfg := retry.Config{MaxAttempts: l.Attempts, InitialInterval: l.Backoff, MaxInterval: l.MaxWait}
	if l.OnRetry != nil {
		rcfg.OnRetry = func(_ context.Context, n int, err error, wait time.Duration) { l.OnRetry(n, err, wait) }
	}
	cfg := watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: l.Slots, MaxQueue: l.Queue, MaxWait: l.QueueWait},
		Deadline: &deadline.Config{Timeout: l.CallTimeout},
		Retry:    &rcfg,
		Breaker:  &breaker.Config{ConsecutiveFailures: l.TripAfter, OpenTimeout: l.OpenFor, OnStateChange: l.OnState},
	}
	if !l.NoThrottle {
		// Headers only: no client-side rate. MaxWait 0 takes the retry's
		// MaxInterval, so no attempt is held longer than a Retry-After
		// would have been waited.
		cfg.RateLimit = &ratelimit.Config{}
	}
	if l.AttemptTimeout > 0 {
		cfg.Attempt = &deadline.Config{Timeout: l.AttemptTimeout}
	}
	h := watertight.HTTPOptions{
		FirstByteTimeout: l.FirstByte,
		IdleTimeout:      l.Idle,
		StreamEnd:        l.StreamEnd,
	}
	if l.Dial != nil && l.Slots >= 1 {
		// A pool of our own, capped at the bulkhead's limit as
		// NewHTTPClient's would be, with the dialer set before any request.
		base := httppolicy.NewDependencyTransport(l.Slots)
		base.DialContext = l.Dial
		h.Base = base
	}
	return watertight.NewHTTPClient(name, cfg, h)
}

// Chat is the little the demo and the tests ask of each provider's client:
// one answer, whole or streamed. OpenAI and Anthropic implement it.
type Chat interface {
	// Complete asks for a whole answer.
	Complete(ctx context.Context, prompt string) (string, error)
	// Stream asks for a streamed answer, calling onDelta with each piece of
	// text as it arrives, and returns the whole text once the stream has
	// ended and been closed.
	Stream(ctx context.Context, prompt string, onDelta func(string)) (string, error)
	// Guard returns the pipeline the client's requests run through.
	Guard() *watertight.Client
}
