// Package adaptive is a bulkhead that finds its own limit: it limits how
// many calls to one dependency run at once, like package bulkhead, and moves
// that limit with the latency the calls see, so that the dependency is kept
// busy but not queueing. Create a [Limiter] with [New].
//
// A call that finds the limit reached waits in a FIFO queue of at most
// Config.MaxQueue callers, for at most Config.MaxWait, or is rejected; the
// admission core (lock-free while nobody waits, direct hand-off to the
// oldest waiter, O(1) cancellation) is the bulkhead's. Lowering the limit revokes nothing: the calls in flight
// finish, and nobody is admitted until fewer than the new limit are in
// flight.
//
// # Outcomes
//
//	outcome                                 error returned                    counted
//	--------------------------------------  --------------------------------  ------------------------------------------
//	admitted at once, or while waiting      fn's error, unchanged             -
//	queue full (or MaxQueue 0) at the limit rejection, Reason "full"          watertight.rejections{reason=full}
//	MaxWait passed while waiting            rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	a Deadline's timer ended ctx, on entry  rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	or while waiting
//	the caller's ctx done on entry or       ctx.Err(); fn not run             not counted: not a rejection
//	while waiting
//
// A rejection matches [ErrFull] and [policy.ErrRejected] with errors.Is, and
// is a *[policy.RejectedError] with Kind "adaptive", the Config.Name and the
// Reason. The same error value is returned for every rejection with the same
// reason, so rejecting allocates nothing; do not modify it. Each rejection is
// counted on watertight.rejections (attributes watertight.policy.kind,
// watertight.policy.name, watertight.rejection.reason), added as a
// watertight.rejected event to the recording span in ctx, and passed to
// Config.OnReject.
//
// The up-down counters watertight.bulkhead.active and
// watertight.bulkhead.queued (attribute watertight.policy.kind "adaptive")
// and the gauge watertight.adaptive.limit report [Limiter.Active],
// [Limiter.Queued] and [Limiter.Limit] at each collection until
// [Limiter.Close].
//
// A panic or runtime.Goexit in fn frees its slot (and is no sample); the
// panic goes on up the stack.
//
// # What it samples
//
// The controller learns from the latency of each attempt at the dependency:
//
//   - Used by itself, [Limiter.Execute] samples fn.
//   - In the Bulkhead slot of a compose pipeline, each attempt below a
//     Retry is one sample, and backoff waits are not latency. compose
//     rejects a Limiter in any other slot.
//   - Through httppolicy's Transport, an attempt's latency ends at its
//     response headers, so a long download is not congestion. The call
//     counts as answered from its headers until it ends. Its sample is
//     taken when the attempt ends, once its outcome is known.
//   - [Permit.Begin] and [Sample.End] sample an attempt by hand.
//
// A success is a latency sample. A timeout (errors.Is
// context.DeadlineExceeded) is a sample of its duration: congestion looks
// like that. Any other failure is no sample, since a dependency that fails
// fast must not look fast. A rejection from below (policy.ErrRejected) and
// a cancellation (context.Canceled) are ignored.
//
// # The algorithm
//
// Samples accumulate in a window. A window closes once it has at least 10
// latency samples and has lasted max(50 ms, 2 x the no-load latency). The
// sample that closes it moves the estimate L, given the limit N that
// admission enforced:
//
//	avg      = mean latency of the window's samples (capped: see below)
//	top      = Tolerance if the calls in flight do not pile up, else 1
//	gradient = clamp(Tolerance x base / avg, 0.5, top)
//	target   = gradient x N + 1
//	target   = min(target, max(L, 2 x peak + 1))  no growth while unused
//	target   = max(target, L)                     no fall if peak < N
//	target   = min(target, L)                     if over half the window failed
//	L        = clamp(L + 0.5 x (target - L), MinLimit, MaxLimit)
//
// peak is the most calls in flight the window saw. A window that never
// reached the limit does not lower it and starts no probe. base is the
// no-load mean, measured by probes (below) and by quiet windows. Once a
// probe has seen a sample above 3 x noLoad, every sample counts at most
// 3 x noLoad. The limit [Limiter.Limit] reports is L rounded, changing
// only once L is 0.75 away from it.
//
// A dependency that serves C calls at once settles at about
// Tolerance x C + 1, with latency about Tolerance times its no-load
// latency. A dependency that fails at once gives no samples, and its limit
// does not move: pair the Limiter with a circuit breaker.
//
// Defaults: Tolerance 1.25, a headroom of 1 call, smoothing 0.5 per
// window, the gradient clamped to [0.5, Tolerance].
//
// # Probes
//
// A probe measures the no-load latency: it caps the calls awaiting their
// answer at 3 (clamped to [MinLimit, MaxLimit]). A call awaits its answer
// from its admission until its answer is marked (httppolicy: its response
// headers), or else until it ends. An answered stream holds its slot
// against the limit but not against the probe's cap. The probe closes at
// its 128th sample, or at its 10th once it has lasted 1 s. noLoad is the
// median of its samples, base their mean.
//
// A probe runs when the Limiter is created: admission starts at
// min(3, InitialLimit), and the first adjustment starts from InitialLimit.
// Later probes start only from a window that reaches the limit:
// ProbeInterval (30 s) after the last, or early when the limit has fallen
// by more than a third within 2 s. The early probe tells a dependency that
// got slower at any load from congestion.
//
// A probe that sees 20 failures, or makes no progress for max(1 s,
// 20 x the no-load or slowest latency), is abandoned: the limit is
// restored, and the next probe is due ProbeInterval later. While nothing
// could be measured, each abandoned probe doubles that wait, up to
// 8 x ProbeInterval, and the limit stays at InitialLimit.
//
// The controller reads the monotonic clock. A Limiter built outside a
// testing/synctest bubble and used in one sees another clock: a reading
// more than 10 s behind the latest, or 10 years ahead, shifts the
// controller's clock and restarts a probe in progress. A Limiter used
// inside and outside a bubble at the same time is not supported.
//
// # Limitations
//
//   - A probe lasts about as long as the slowest calls in flight, up to
//     their deadline. Calls arriving meanwhile wait or are rejected: give
//     the Limiter a queue (MaxQueue, MaxWait) if that matters.
//   - A limit the calls do not reach does not come down, and grows to at
//     most 2 x peak + 1. Fewer closed-loop callers than the limit are not
//     limited, whatever the latency.
//   - Once a probe has seen a tail, congestion that shows only as a tail
//     (a LIFO server) is capped with it and may be limited late.
//   - The probe sees the dependency under this process's load only.
//   - It learns only when calls end: give calls a deadline (compose's
//     Attempt slot).
//   - Only httppolicy marks answers: a stream read any other way is
//     sampled, and awaits its answer, until the call ends.
//   - Calls of very different kinds (short calls and long polls) make one
//     latency: give each kind its own Limiter.
//
// # Cost
//
// An admitted call costs the bulkhead's admission, two clock reads, one
// allocation (its attempt's context) and a few atomic operations; a
// rejection allocates nothing. No goroutine or timer runs in the
// background: the controller moves on the goroutine of the sample that
// closes a window, under a mutex.
package adaptive
