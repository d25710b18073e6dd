package httppolicy

import "net/http"

// Signals is told of every response a [Transport]'s attempts receive, so
// that a policy shared by the calls to one dependency can learn from what
// the server says about its limits: a 429's Retry-After, the
// x-ratelimit-remaining-* headers that arrive on a 200. The ratelimit
// package's Limiter implements it; watertight.NewHTTPClient wires the
// pipeline's RateLimit slot in as the Transport's Signals.
//
// Observe is called once per response, successes and failures alike, on
// the goroutine that runs the attempt, as soon as the response headers are
// in and before the attempt's outcome reaches the policies (so that a hold
// a 429 starts is in place before the retry decides). It must read only
// resp.StatusCode and resp.Header: it must not read or close the body, and
// must not keep resp. It must be safe for concurrent use and quick. A
// panic in Observe goes up through the attempt as a panic in fn would.
type Signals interface {
	Observe(resp *http.Response)
}
