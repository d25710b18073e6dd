// Package route spreads the attempts of calls over equivalent endpoints
// (deployments in several regions, several API keys, N replicas) and
// routes around one that turns slow, fails or hangs, while the others
// take its share.
//
// A [Router] holds the endpoints, each with a name, a weight, an optional
// cap on its calls in flight, and its own RateLimit, Breaker and Attempt
// policies. Put it in the Route slot of a compose pipeline; the order is
//
//	Bulkhead -> Deadline -> Retry -> Route (the pick) -> the endpoint's RateLimit -> Breaker -> Attempt -> fn
//
// fn learns its endpoint from its context ([EndpointOf]), or as an
// argument through [Do].
//
// # The pick
//
// Each attempt goes to the lighter of two endpoints drawn at random (the
// power of two choices). An endpoint's load is its latency estimate times
// its calls in flight plus one, over its weight. The estimate is a peak
// EWMA of its latencies, as Finagle's and Linkerd's: a slower latency is
// taken at once, and faster ones pull it down over Config.Decay. It is the
// age of the endpoint's oldest unanswered call instead, when that is more:
// an endpoint whose calls hang looks slow before any of them ends. The
// latency of a streamed answer is its time to the first byte (the first
// event of an event stream, as httppolicy's Transport marks it). A failure
// counts as a latency of twice the estimate, or its own time if more. An
// attempt cut short by its caller, or lost in a hedge, is no failure, but
// its time so far counts if above the estimate: the endpoint took at least
// that.
//
// A retry picks again and avoids the endpoints the call has tried while
// another is in; so does each attempt of a hedge around the pipeline.
//
// # Out, ejected, and back
//
// An endpoint is out, and takes no calls but its probes, while:
//   - its own RateLimit or Breaker refused an attempt (the attempt goes
//     on to another endpoint at once), or its RateLimit's hold is on, or
//     it answered with a spent quota (policy.ErrQuotaSpent);
//   - it is ejected: its estimate was more than Config.OutlierFactor times
//     that of the endpoint it was drawn against, and more than 100 ms
//     above it (below that, a ratio is noise: a new connection, a pause).
//     At most Config.MaxEjectedShare of the endpoints are ejected at once.
//
// An endpoint at its MaxConcurrent is not out: the attempt goes to
// another.
//
// An endpoint that is out gets one call, its probe, one at a time, each
// Config.ProbeInterval (its hold's end, for a hold); the wait doubles
// after each probe that ran and did not bring it back, up to ten times
// ProbeInterval, so that a sick endpoint's probes take few of a light
// traffic. A probe that hangs holds the next until its Attempt timeout. A
// probe that succeeds brings it back, with the probe's latency as its
// estimate, and its weight rising from a tenth to all of it over
// Config.Decay, so that its calls come back gradually, not in a herd. An
// ejected endpoint comes back only if that latency is no outlier beside
// the fastest estimate of the endpoints in.
//
// When every endpoint is out, the attempt goes to the fastest of them by
// estimate (the least bad: a hold waits in its RateLimit, and an open
// breaker refuses at once). When the endpoints in are all at their
// MaxConcurrent, or every endpoint has refused the attempt, the call is
// rejected: an endpoint out never takes the load the others have no room
// for.
//
// # Outcomes
//
//	what happened                            the call gets                       counted
//	---------------------------------------  ----------------------------------  -------------------------------------
//	the endpoint's own RateLimit or Breaker  nothing: the attempt goes on to     watertight.rejections of that policy
//	refused the attempt                      another endpoint, at once
//	fn returned policy.ErrQuotaSpent while   nothing: the attempt goes on to     -
//	another endpoint is in                   another endpoint, at once
//	every endpoint refused the attempt, or   *policy.RejectedError, Kind         watertight.rejections
//	those in are all at their                "route", Reason "unavailable",      {route, unavailable}
//	MaxConcurrent                            matching ErrUnavailable
//	anything else                            what the endpoint's policies and    watertight.route.picks{endpoint}
//	                                         fn return
//
// # Changing settings
//
// [Router.Update] changes the settings of a running Router, and
// [Router.Config] reads them. The endpoints are fixed at New, with their
// RateLimit, Breaker and Attempt policies (each has its own Update); an
// update changes their Weight and MaxConcurrent, Decay, OutlierFactor,
// MaxEjectedShare and ProbeInterval. The new settings hold for the picks
// after it. An attempt already picked ends under the settings of its
// pick, and none is cut short: an endpoint over a lowered MaxConcurrent
// takes no new attempt until its attempts in flight drop below it.
// Latency estimates, calls in flight and the endpoints out carry over: an
// ejected endpoint comes back by its probe, judged by the new
// OutlierFactor, however the settings changed; a probe already due at a
// time keeps it. A returned endpoint's weight goes on rising to the new
// Weight, over the new Decay.
//
// # Telemetry
//
// Counters watertight.route.picks (attempts sent), watertight.route.ejections
// and watertight.route.returns, and the gauge watertight.route.load (the
// load score in seconds), each with the watertight.route.endpoint
// attribute; a span event watertight.route.picked per attempt.
//
// # Cost
//
// A pick reads atomics, and the hold of the endpoint it chose (its
// RateLimit's Held); an attempt's start and end each take the endpoint's
// mutex once, to keep its calls in order of age. With one endpoint there
// is no choice to make, and no age is kept.
package route
