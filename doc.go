// Package watertight builds, from one [Config], a pipeline that guards
// calls to one dependency: a bulkhead, a whole-call deadline, retries, a
// rate limit, a circuit breaker and a per-attempt deadline, in the fixed
// order package compose documents. It records an OpenTelemetry span per
// call and counts every rejection.
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
// A Config is also data: it reads and writes JSON with encoding/json, each
// section under its key, durations as Go duration strings and priorities
// by name. Reading refuses what New refuses, and an unknown key (keys
// match exactly), with an error that names the JSON path:
// "bulkhead.limit: must be >= 1, got 0"; a route may name no endpoints
// (an HTTP client's come from its HTTPOptions, and an update keeps those
// in force). Writing leaves zero fields out. Hooks, MeterProvider and Use
// are not data: reading leaves them as they are. A route endpoint's
// policies are not data either: an "endpoints" list read replaces the
// endpoints, policies included.
//
// [Pipeline.Update] changes a running pipeline's settings from a Config,
// in place: see the README's "Changing settings at run time".
//
//	{
//		"bulkhead": {"limit": 10, "max_queue": 20, "max_wait": "1s"},
//		"deadline": {"timeout": "30s"},
//		"retry": {"max_attempts": 3},
//		"breaker": {},
//		"attempt": {"timeout": "10s"}
//	}
//
// [NewHTTPClient] puts such a pipeline around every request of an
// *http.Client. With [Config.Route] (or [HTTPOptions.Endpoints]) each
// attempt goes to one of several equivalent endpoints, each with its own
// rate limit, breaker and attempt deadline (package route). The policy
// packages, compose and httppolicy cover the rest.
package watertight
