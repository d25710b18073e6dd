// Package adaptive is a bulkhead that finds its own limit. A [Limiter]
// limits how many calls to one dependency run at once, as package bulkhead
// does. It moves that limit with the latency of the calls, so that the
// dependency stays busy without queueing.
//
// A call that finds the limit reached waits in a FIFO queue of at most
// Config.MaxQueue callers, for at most Config.MaxWait, or is rejected.
// Lowering the limit revokes nothing: the calls in flight finish, and
// nobody is admitted until fewer than the new limit are in flight.
//
// Waiters are served highest priority first ([policy.WithPriority]), as in
// package bulkhead: a call finding the queue full takes the place of the
// newest waiter of the lowest priority below its own, which is shed.
// Config.Reserve keeps slots for the higher priorities; when the limit
// falls, the lower ones lose their slots first. There is no ageing: under a
// steady load of higher priorities, a lower one waits until MaxWait or its
// context ends, and with neither it can wait forever.
//
// Config.FairShare serves the waiters of each priority key by key
// ([policy.WithKey]), round robin, and Config.MaxPerKey caps the slots one
// key holds, as in package bulkhead (its "Fair share by key" section says
// the rules, shedding included). A call whose key is at its cap and that
// may not wait is rejected "key_full". When the limit falls, a key at its
// cap keeps the slots it holds: nothing is revoked.
//
// # Outcomes
//
//	outcome                                 error returned                    counted
//	--------------------------------------  --------------------------------  ------------------------------------------
//	admitted at once, or while waiting      fn's error, unchanged             -
//	queue full (or MaxQueue 0) at the limit rejection, Reason "full"          watertight.rejections{reason=full}
//	MaxWait passed while waiting            rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	a higher priority, or a key with fewer  rejection, Reason "shed"          watertight.rejections{reason=shed}
//	waiters, took its place in the full
//	queue while it waited
//	its key held MaxPerKey slots and it     rejection, Reason "key_full"      watertight.rejections{reason=key_full}
//	could not wait (queue full or MaxQueue
//	0)
//	a Deadline's timer ended ctx, on entry  rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	or while waiting
//	the caller's ctx done on entry or       ctx.Err(); fn not run             not counted: not a rejection
//	while waiting
//
// A rejection is a *[policy.RejectedError] with Kind "adaptive", the
// Config.Name and the Reason. Rejections with the same reason share one
// error value; do not modify it. Each rejection is also added as a
// watertight.rejected event to the recording span in ctx, and passed to
// Config.OnReject.
//
// The up-down counters watertight.bulkhead.active and
// watertight.bulkhead.queued (watertight.policy.kind "adaptive") and the
// gauge watertight.adaptive.limit report [Limiter.Active],
// [Limiter.Queued] and [Limiter.Limit] until [Limiter.Close].
//
// # What it samples
//
// The limiter learns from the latency of each attempt. In the Bulkhead
// slot of a compose pipeline (compose rejects it elsewhere), each attempt
// below a Retry is one sample. Through httppolicy's Transport, the latency
// ends at the response headers, so a long download is not congestion.
// [Permit.Begin] and [Sample.End] sample an attempt by hand.
//
// A success is a latency sample. So is a timeout (errors.Is
// context.DeadlineExceeded): congestion looks like that. Any other failure
// is no sample, since a dependency that fails fast must not look fast. A
// rejection from below (policy.ErrRejected), a cancellation
// (context.Canceled) and a panic are ignored.
//
// # The algorithm
//
// Samples accumulate in a window. A window closes once it has at least 10
// latency samples and has lasted max(50 ms, 2 x the no-load latency). It
// then moves the estimate L, given the limit N that admission enforced:
//
//	avg      = mean latency of the window's samples
//	top      = Tolerance if the calls in flight do not pile up, else 1
//	gradient = clamp(Tolerance x base / avg, 0.5, top)
//	target   = gradient x N + 1
//	target   = min(target, max(L, 2 x peak + 1))  no growth while unused
//	target   = max(target, L)                     no fall if peak < N
//	target   = min(target, L)                     if over half the window failed
//	L        = clamp(L + 0.5 x (target - L), MinLimit, MaxLimit)
//
// peak is the most calls in flight the window saw, each sample counting
// the slots reserved above its priority (Config.Reserve) as in flight:
// a call reaches the limit at its own ceiling. base is the no-load
// mean latency, measured by probes and by quiet windows. Once a probe has
// seen a sample above 3 x noLoad, samples count at most 3 x noLoad.
// [Limiter.Limit] is L rounded, and changes once L is 0.75 away from it.
//
// # Probes
//
// A probe measures the no-load latency. It caps the calls awaiting their
// answer at 3 (clamped to [MinLimit, MaxLimit]); an answered stream does
// not count. It closes at its 128th sample, or at its 10th once it has
// lasted 1 s. noLoad is the median of its samples, base their mean.
//
// A probe runs when the Limiter is created. Later probes start only from a
// window that reaches the limit: ProbeInterval after the last, or early
// when the limit has fallen by more than a third within 2 s. A probe ends
// early after 20 failures, or after max(1 s, 20 x the latency) without
// progress (before the first measurement, with calls in flight, at least
// ProbeInterval). While nothing has been measured, each probe that ended
// so doubles the wait for the next, up to 8 x ProbeInterval.
//
// With testing/synctest, build a Limiter in the bubble that uses it: its
// clock starts when it is built, and a bubble's clock is another one.
//
// # Changing settings
//
// [Limiter.Update] changes the settings while calls run, and
// [Limiter.Config] returns those in force. The learned limit and the
// no-load latency survive an update: InitialLimit only starts a limiter,
// and the learned limit is clamped to the new MinLimit and MaxLimit.
// Admissions, waiters and MaxQueue, MaxWait, Reserve and MaxPerKey change
// as they do in package bulkhead, and FairShare is fixed at New: no call
// is cut or shed by an update, a lower limit admits nobody until fewer
// calls than it run, and a new MaxWait applies to the callers who queue
// after it.
//
// # Limitations
//
//   - During a probe, calls beyond its cap wait or are rejected. Give the
//     Limiter a queue (MaxQueue, MaxWait) if that matters.
//   - A limit the calls do not reach does not come down.
//   - It learns only when calls end: give calls a deadline.
//   - A dependency that fails at once gives no samples, so its limit does
//     not move. Pair the Limiter with a circuit breaker.
//   - Give calls of very different kinds (short calls and long polls)
//     their own Limiter.
//
// An admitted call costs two clock reads and one allocation. A rejection
// allocates nothing. No goroutine or timer runs in the background.
package adaptive
