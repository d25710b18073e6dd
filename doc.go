// Package watertight builds, from one value, a pipeline that guards calls
// to one dependency: a bulkhead, a whole-call deadline, retries, a circuit
// breaker and a per-attempt deadline, chained in the fixed order package
// compose documents, with an OpenTelemetry span per call and a counter for
// every rejection.
//
//	p, err := watertight.New("llm", watertight.Config{
//		Bulkhead: &bulkhead.Config{Limit: 10, MaxQueue: 20, MaxWait: time.Second},
//		Deadline: &deadline.Config{Timeout: 30 * time.Second},
//		Retry:    &retry.Config{MaxAttempts: 3},
//		Breaker:  &breaker.Config{},
//		Attempt:  &deadline.Config{Timeout: 10 * time.Second},
//	})
//	if err != nil { ... }
//	defer p.Close()
//	answer, err := policy.Do(ctx, p, callTheProvider)
//
// [New] is the one constructor most users need: each section of [Config]
// is the Config of the policy for that slot, and a nil section leaves the
// slot empty. [NewHTTPClient] puts such a pipeline around every request of
// an *http.Client, the client an LLM SDK or any HTTP API client takes.
//
// The policy packages (bulkhead, deadline, retry, breaker), package compose
// and package httppolicy stay available for what New does not cover:
// policies shared between pipelines, user-written policies (through
// [Config.Use]), a server-side [httppolicy.Handler].
package watertight
