// Package adaptive is a bulkhead that finds its own limit: it limits how
// many calls to one dependency run at once, like package bulkhead, and moves
// that limit with the latency the calls see, so that the dependency is kept
// busy but not queueing. Create a [Limiter] with [New].
//
// A call that finds the limit reached waits in a FIFO queue of at most
// Config.MaxQueue callers, for at most Config.MaxWait, or is rejected; the
// admission core (lock-free while nobody waits, direct hand-off to the
// oldest waiter, O(1) cancellation) is the bulkhead's, shared through an
// internal package. Lowering the limit revokes nothing: the calls in flight
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
//   - Used by itself, [Limiter.Execute] times fn (two clock reads).
//   - In package compose's pipeline, in the Bulkhead slot, compose runs the
//     Limiter in two phases and reports each attempt from below, so that a
//     Retry inside it gives one sample per attempt, and its backoff waits
//     are not taken for latency. Put the Limiter in the Bulkhead slot:
//     compose tells only that slot the latencies, and its New rejects a
//     Limiter in any other.
//   - Through package httppolicy (its Transport's Policy, by itself or in
//     a pipeline), an attempt's latency is the time to the response
//     headers, not to the end of the body, so that a long download is not
//     taken for congestion. The Transport marks the moment the headers
//     arrive, and the Limiter learns of it then: from then on the call is
//     answered, and holds its slot (against the limit) without awaiting
//     anything from the dependency, which matters to a probe (below). The
//     sample itself, the time to the headers, arrives when the attempt
//     ends, with the body: only then is its outcome known (a 503's
//     headers are no fast success).
//
// A success is a latency sample. A failed attempt is not, since a dependency
// that fails fast must not look fast, unless it is a timeout (errors.Is
// context.DeadlineExceeded): a timeout is a sample with its duration, since a
// congested dependency looks exactly like that. A rejection from a policy
// below (errors.Is policy.ErrRejected) and a cancellation
// (context.Canceled) say nothing about the dependency and are ignored.
//
// # The algorithm
//
// Samples accumulate in a window: their count and the sum of their
// latencies, the failures, and the most calls seen in flight. A window
// closes once it has at least 10 latency samples and has lasted at least
// max(50 ms, 2 x the no-load latency), so that the calls admitted under the
// previous limit have mostly finished; the sample that closes it updates the
// estimate L (a real number), from the learned limit N that admission
// enforced while the window's calls ran (L rounded, with hysteresis: below):
//
//	avg      = mean latency of the window's samples (capped: below)
//	top      = Tolerance if the calls in flight do not pile up, else 1 (below)
//	gradient = clamp(Tolerance x base / avg, 0.5, top)  (both at least 10 µs)
//	target   = gradient x N + 1
//	target   = min(target, max(L, 2 x peak + 1))  no growth while the limit is unused
//	target   = max(target, L)                     no fall if peak < N
//	target   = min(target, L)                     if more than half the window failed
//	L        = clamp(L + 0.5 x (target - L), MinLimit, MaxLimit)
//
// peak is the most calls in flight that the window's samples read, each
// counting itself. A window with peak < N never reached the limit: its
// calls ran at a lower concurrency than N, so its latency says nothing of
// N. Slow calls in it (a tail, calls that hang until their deadline) do
// not lower the limit, and it starts no probe (below). After the first
// probe, a dependency whose calls stay below the limit is thus never
// limited, whatever the shape of its latency: the limit comes down only
// in windows that reach it.
//
// base is the no-load mean: the mean of a probe's samples, moved a
// quarter of the way towards each quiet window's mean (below). It is a mean
// because avg is one: a dependency whose answers have a heavy tail (one in
// ten taking ten times the others) has a mean twice its median at any
// load, which against the median would read as congestion and drive the
// limit towards 1 / (1 - gradient), about 3; while congestion that shows
// as a tail (a LIFO server whose oldest calls starve, timeouts) moves avg
// at full weight. But a window's mean of a tail follows the few slow calls
// it happens to hold. So once a probe, with at most 3 calls in flight, has
// seen a sample above 3 x noLoad, the tail is taken for the dependency's
// own: from then on each sample counts at most 3 x noLoad, in the windows
// and in base alike, and the capped means of a steady dependency agree
// closely whatever its tail. A probe that sees no such sample lifts the
// cap; an early probe (below) only sets it.
//
// The gradient rises above 1, so that the limit grows by up to an eighth
// per window, only while the calls in flight do not pile up: the window's
// Little's latency (the calls awaiting their answer, the mean of their
// count when it opened and when it closed, over the rate at which its
// calls ended) must be at most Tolerance times the mean of its samples,
// uncapped. A window's samples are the calls that ended in it, which just
// after a rise of the limit are the fast ones; the slow calls admitted at
// the higher limit are still in flight, and Little's latency counts them.
// While no cap is set, the gradient also stays at most 1 once the estimate
// reaches the lowest at which a window that reached the limit read a
// gradient below 1, until the next periodic probe: that congestion is
// approached again one call at a time.
//
// The learned limit, which admission enforces outside probes and
// [Limiter.Limit] and the gauge report, is L rounded, with hysteresis: it
// changes only once L is 0.75 away from it, so that an estimate hovering
// around 7.5 does not flip the limit between 7 and 8 every window. During
// a probe admission is capped lower (below); Limit goes on reporting the
// learned limit, which the probe does not change. The gradient is applied
// to N, not to L, because the window's latency is N's: applied to L, an
// equilibrium between two integers (7.25, say) became a cycle in the
// simulation of the bench suite, the estimate climbing past 7.75 while 7
// were admitted and falling past 7.25 while 8 were.
//
// Why this settles where it should: take a dependency that serves C calls at
// once at latency B and queues the rest, so that with L in flight above C its
// latency is B x L / C. With noLoad = B, the gradient is Tolerance x C / L,
// and the fixed point of L = gradient x L + 1 is
//
//	L = Tolerance x C + 1
//
// where the latency is about Tolerance x B: the limit stops a little above
// the capacity, with the latency Tolerance times the no-load latency. For
// C = 10 and the default Tolerance 1.25 it is 13.5 (latency 1.35 x B). While
// the gradient lies in [0.5, Tolerance] the target there does not depend on
// L, so each window halves the distance to it; far above it the gradient is
// clamped at 0.5 and each window cuts the limit by a quarter at most; below
// it, at the no-load latency, the target is Tolerance x N + 1 and the
// estimate grows by about an eighth per window, or, with the gradient at
// most 1 (above), by half a call.
//
// A dependency that answers instantly with errors gives no latency samples,
// so its windows never close and the limit does not move; a window more
// than half failures may shrink the limit but never raises it. Pair the
// Limiter with a circuit breaker for dependencies that fail fast.
//
// The defaults and their reasons:
//
//   - Tolerance 1.25, as the 25% buffer of Envoy's gradient controller:
//     Netflix's Gradient2 lets the latency rise by its rttTolerance of 1.5.
//   - A constant headroom of 1 call where Envoy adds sqrt(L): sqrt(9) is a
//     third of a limit of 9, so small limits overshoot the capacity with it.
//   - Smoothing 0.5 per window (Gradient2's smoothing is 0.2): the
//     windows here are longer, so fewer updates need a bigger step; one
//     noisy window still moves the limit by a quarter at most.
//   - The gradient clamped below at 0.5, as in Gradient2 and Envoy, and
//     above at Tolerance where they clamp it at 1: a limit of 20 grows to
//     the 60 calls a dependency may be offered in about ten windows, not
//     eighty.
//
// # The no-load latency, and drift
//
// noLoad is measured, not inferred: during a probe the calls awaiting their
// answer are capped at 3 (clamped to [MinLimit, MaxLimit]; Envoy measures
// its minRTT the same way, at concurrency 3). Once the calls admitted
// before the probe have drained to 3 awaiting, every call admitted is the
// probe's. The probe closes at its 128th sample, or at its 10th once it
// has lasted 1 s (an early probe, below, at its 10th): it admits no one
// new until its calls still awaiting (3 at most) have answered. Its
// samples are then those of every call it admitted that answered, the slow
// ones too, not the first to answer, which are the fast ones. 128 samples
// miss a tail of one call in twenty about once in 700 probes; the bound of
// 1 s keeps short the probe of a slow dependency, or at low traffic.
// noLoad is their median (robust to the one lucky or unlucky call that a
// minimum would follow), which sets the window's length and a probe's
// patience, and base is their mean (capped, if they hold a tail). A probe
// runs when the Limiter is created (admission starts at min(3,
// InitialLimit), and the first adjustment starts from InitialLimit). After
// that a probe starts only from a window that reaches the limit: one due
// ProbeInterval (30 s) after the last, or one early when the limit has
// fallen by more than a third within 2 s.
//
// A call awaits its answer from its admission until its answer is marked
// (through httppolicy: its response headers) or, without such a mark,
// until it ends; a Retry's next attempt awaits again. A stream whose
// headers arrived no longer counts against the probe's cap, though it
// holds its slot against the limit for the whole body: admission during a
// probe is min(learned limit, 3 + answered calls in flight), moved as each
// answer arrives and each answered call ends; once the probe has closed it
// is min(learned limit, answered calls in flight), and at least 1. A
// probe of streams then admits streams up to the limit, 3 at a time
// awaiting their headers, and takes its samples as their bodies end. A
// closed probe waits for the calls awaiting their answer, not for bodies:
// a stream still streaming when the probe ends gives it no sample. Calls
// without a mark (any call not made through httppolicy) are capped at 3
// slots.
//
// A quiet window, of at most 16 samples whose calls all ran with at most 3
// slots held (answered streams included), below the limit, and mostly
// succeeded, ran as a probe does, without capping anything. Its mean moves
// base a quarter of the way towards it, and if it agrees with base (within
// Tolerance either way) it confirms it: the next periodic probe is due
// ProbeInterval later, so that a burst that reaches the limit after low
// traffic meets the learned limit, not a probe's cap. A quiet window never
// moves the limit: with at most 3 in flight no queueing is this limiter's
// doing.
//
// The early probe is the answer to drift. A rise of the base latency (the
// dependency got slower at any load: a cold cache, a failover to a far
// region) looks like congestion to a gradient and drives the limit down;
// re-measuring noLoad at low concurrency tells the two apart, and the limit
// climbs back to Tolerance x C + 1 under the new base. Controllers that take
// their baseline from a long average of the latency they see (Gradient2's
// long-window RTT, failsafe-go's adaptivelimiter, which compares its p90
// with a moving-average baseline: its issue #127) have the opposite
// problem: during a long incident the baseline drifts up with the
// congestion it should measure against, and the limit creeps back up.
// Vegas estimates the queue as L x (1 - noLoad/latency) with noLoad the
// minimum latency seen, growing below alpha and shrinking above beta queued
// calls; a minimum is biased low by one lucky sample, hence a probe's
// median and mean here.
//
// A probe that sees 20 failures before it closes, or makes no progress (no call drained, no
// sample taken) for max(1 s, 20 x the no-load or the longest latency it
// saw, or the slowest answer of the window before it, so that after a
// drift to a slow dependency the probe waits for its answers), is
// abandoned: the limit is restored and the next probe is due ProbeInterval
// later. A closed probe is not abandoned: once its calls still awaiting
// have made no progress for that long, it ends measured with the samples
// it has. Progress, not age, is what counts: a probe at low traffic,
// or of streams (whose samples come as their bodies end), is slow but ends
// measured. Calls held in flight meanwhile (hung calls, long streams) do
// not keep a probe alive: they are no no-load samples. Only the first
// probe, before any latency is known, gives calls in flight up to
// max(that, ProbeInterval) to report, since the dependency may be slow
// (an LLM's answer, a stream's body); while nothing could be
// measured (calls that hang from the start, streams without a mark held
// longer than a probe lasts), each abandoned probe doubles the wait for
// the next, from ProbeInterval up to 8 x ProbeInterval, and the limit
// meanwhile stays at InitialLimit: a static bulkhead, not the probe's cap.
// Each admission during a probe, and each sample, checks whether the probe
// is stale, so that an idle spell or a few hung calls do not keep
// admission at 3 for the next burst. Until a first probe succeeds the
// limit stays at InitialLimit, and the next window that reaches it starts
// another probe once the wait above has passed.
//
// The controller's clock is the monotonic clock. A Limiter built outside a
// testing/synctest bubble and used inside one (or in two bubbles in turn)
// sees the readings of another clock: a reading more than 10 s behind the
// latest (a bubble's clock starts in the year 2000), or more than 10 years
// ahead, shifts the controller's clock so that time continues from the
// latest, and starts a probe in progress again. A bubble that follows one of
// less than 10 s of fake time is not told apart: the limiter learns
// nothing until its clock has caught up. A Limiter used inside and outside
// a bubble at the same time is not supported.
//
// # Limitations
//
//   - A probe waits for the calls in flight to drain to 3 awaiting their
//     answer, caps them at 3 until it has its samples, and then admits no
//     one new until its own calls have answered: it lasts about as long
//     as the slowest calls in flight take, up to their deadline. Calls
//     arriving meanwhile wait or are rejected, so give the Limiter a queue
//     (MaxQueue, MaxWait) if that matters. After the first, probes run
//     only while the calls reach the limit.
//   - A limit that the calls do not reach does not come down, and while
//     unused it grows to at most 2 x peak + 1. Callers fewer than the
//     limit, in a closed loop, that congest the dependency are therefore
//     not limited: the limit stays above them whatever the latency.
//   - Once a probe has seen a tail, congestion that shows only as a tail
//     (a LIFO server whose oldest calls starve until their deadline) is
//     capped with it: each of those calls counts 3 x noLoad, and such a
//     dependency may be limited late or not at all. A tail rarer than one
//     call in a hundred often escapes a probe; the windows are then
//     uncapped, and the few slow calls one holds can lower the limit.
//   - The probe sees the dependency under this process's load only: if
//     other clients congest it, the congested latency is taken for the
//     no-load latency. A dependency that queues below 3 calls in flight reads
//     slower at the probe than it is.
//   - It learns only when calls end: give calls a deadline (compose's
//     Attempt slot), or a dependency that never answers holds its slots, no
//     window closes, and each probe is abandoned without a measurement.
//   - Streams are measured at their headers beside the bodies still
//     streaming: the probe's no-load latency is the time to headers while
//     the dependency sends up to the limit's bodies, not on an idle
//     dependency. Only httppolicy marks answers: a streamed answer through
//     any other path (a gRPC stream, fn reading a body itself) is sampled,
//     and awaits its answer, until the call ends. A stream's sample
//     arrives when its body ends, so a probe of streams lasts the longer
//     of 1 s and the time 10 bodies take to end at the limit's
//     concurrency, and at most the time 128 take; once noLoad
//     is known a probe waits between samples at most the longer of 1 s
//     and 20 x noLoad (or the slowest answer of the last window), so
//     with the limit full of streams whose bodies end less often than
//     that, it is abandoned and noLoad stays as it was until a later one
//     succeeds. Which samples
//     a probe takes is judged from the attempt's end less its latency,
//     taken for its start: for a stream that is the end of its headers
//     plus its body, so a stream admitted before the probe, while more
//     than 3 awaited their headers, may be taken for one admitted during
//     it.
//   - Calls of very different kinds through one Limiter (short calls and
//     long polls) make one latency of them: a long poll's minute becomes
//     the no-load latency. Give each kind its own Limiter. (A long poll's
//     headers usually come with its answer, at the end: marking answers
//     does not help it.)
//
// # Cost
//
// A call while no probe runs costs the bulkhead's admission (a
// compare-and-swap, a decrement), two clock reads in Execute (compose reads
// its own), a look-up of the context's values (for httppolicy's mark of
// the answer), an atomic add into the window and a few atomic loads;
// closing a window takes a mutex about every 50 ms. A call whose answer is
// marked (through httppolicy) adds a few uncontended atomic operations on
// its own clock and two atomic adds to a count of answered calls. Nothing
// is allocated, and no goroutine or timer runs in the background: the
// controller moves only when samples arrive, on the goroutine of the
// sample that closes a window; during a probe each admission reads the
// clock once to see whether the probe is stale (under a TryLock; one that
// finds the lock taken goes on while the probe is surely live, and waits
// for the lock once it may be stale, since the holder may be abandoning
// it), and each answer, and each end of an answered call, takes the mutex
// to move the probe's cap.
package adaptive
