package httppolicy

import (
	"net/http"
	"time"

	"github.com/watertight/watertight/ratelimit"
)

// Signals is told of every response a [Transport]'s attempts receive, so
// that a policy shared by the calls to one dependency can learn from what
// the server says about its limits: a 429's Retry-After, the
// x-ratelimit-remaining-* headers that arrive on a 200. [LimiterSignals]
// feeds a ratelimit.Limiter from them; watertight.NewHTTPClient wires the
// pipeline's RateLimit slot in that way.
//
// Observe is called once per response, successes and failures alike, on
// the goroutine that runs the attempt, as soon as the response headers are
// in and before the attempt's outcome reaches the policies (so that a hold
// a 429 starts is in place before the retry decides). It must read only
// resp.StatusCode, resp.Header and resp.Request: it must not read or close
// the body, and must not keep resp. It must be safe for concurrent use and
// quick. A panic in Observe goes up through the attempt as a panic in fn
// would.
type Signals interface {
	Observe(resp *http.Response)
}

// LimiterSignals returns the Signals that feed l from every response: it
// reads the response's rate-limit headers into a [ratelimit.Answer] and
// passes it to l's Observe. The hold is [RateLimitHold]'s, for the cost
// declared with [ratelimit.WithCost] in the context of resp.Request, if
// any. The count, the limit and the reset are those of the requests bucket
// (OpenAI's x-ratelimit-*-requests, else Anthropic's
// anthropic-ratelimit-requests-*). A nil response is ignored. If l is nil,
// LimiterSignals returns nil. Two Signals returned for the same l are
// equal. They are safe for concurrent use.
func LimiterSignals(l *ratelimit.Limiter) Signals {
	if l == nil {
		return nil
	}
	return limiterSignals{l}
}

// limiterSignals is the Signals of [LimiterSignals].
type limiterSignals struct{ l *ratelimit.Limiter }

func (s limiterSignals) Observe(resp *http.Response) {
	if resp != nil {
		s.l.Observe(rateLimitAnswer(resp, time.Now()))
	}
}
