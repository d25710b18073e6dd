// Package bulkhead limits how many calls to one dependency run at once, so
// that a slow dependency cannot take every goroutine, socket or server slot
// and starve calls that do not need it.
//
// A [Bulkhead] has Config.Limit slots. A call that finds a free slot takes it
// and runs; a call that finds none waits in a FIFO queue of at most
// Config.MaxQueue callers, for at most Config.MaxWait, and is rejected at once
// when the queue is full. A slot freed by a finished call goes straight to
// the oldest waiter.
//
// # Outcomes
//
//	outcome                                 error returned                    counted
//	--------------------------------------  --------------------------------  ------------------------------------------
//	slot free, or given one while waiting   fn's error, unchanged             -
//	queue full (or MaxQueue 0) and no slot  rejection, Reason "full"          watertight.rejections{reason=full}
//	MaxWait passed while waiting            rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	a Deadline's timer ended ctx, on entry  rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	or while waiting
//	the caller's ctx done on entry or       ctx.Err(); fn not run             not counted: not a rejection
//	while waiting
//
// A call that never ran fn ends as a rejection or as the caller's ctx
// error, never as a timeout: a Deadline's timer (the ctx's cause matches
// deadline.ErrExceeded) ending the wait is this bulkhead's rejection.
//
// A rejection matches [ErrFull] and [policy.ErrRejected] with errors.Is, and
// is a *[policy.RejectedError] with Kind "bulkhead", the Config.Name and the
// Reason, for errors.As. The same error value is returned for every rejection
// with the same reason (it is prepared by [New]), so rejecting allocates
// nothing; do not modify it. Each rejection is counted on
// watertight.rejections (attributes watertight.policy.kind,
// watertight.policy.name, watertight.rejection.reason), added as a
// watertight.rejected event to the recording span in ctx, if any, and passed
// to Config.OnReject.
//
// The up-down counters watertight.bulkhead.active and
// watertight.bulkhead.queued report [Bulkhead.Active] and [Bulkhead.Queued]
// at each collection until [Bulkhead.Close].
//
// [Bulkhead.Acquire] takes a slot for longer than one function call (a
// websocket, a stream the caller reads), with the outcomes above; the
// [Permit] it returns frees the slot when released.
//
// A panic or runtime.Goexit in fn frees its slot; the panic goes on up the
// stack. Package compose runs a Bulkhead in two phases (take a slot, then
// free it), without a closure per call.
//
// # Concurrency design
//
// The state is a count of held slots and a count of waiters (both atomic),
// and, under a mutex, an intrusive doubly linked list of waiters (an
// internal package that package adaptive shares, with a limit that moves). A buffered
// channel used as a semaphore (the usual Go bulkhead) would be simpler, but
// it cannot give what this package promises:
//
//   - FIFO hand-off. While nobody waits, a call takes a slot with a
//     compare-and-swap on the count and gives it back with a decrement: no
//     lock, and under contention a failed swap retries instead of parking
//     the goroutine. Once anyone waits, every acquire and release goes
//     through the mutex: a release does not free its slot but unlinks the
//     oldest waiter, marks it granted and wakes it, and the count does not
//     change. A caller arriving between the release and the waiter waking
//     finds no free slot, so it cannot jump the queue. A release on the fast
//     path and a caller starting to wait at the same instant each write one
//     atomic and then read the other's (Go's atomics are sequentially
//     consistent), so at least one of them sees the other and hands the
//     freed slot to the oldest waiter under the mutex: no slot sits free
//     while someone waits.
//   - O(1) removal. A waiter that gives up (MaxWait or its ctx) unlinks itself
//     through its own prev and next pointers; the cost of cancelling does not
//     grow with the queue.
//   - Exact counts. Active and Queued read the atomics that decide
//     admission: once calls settle they equal the slots held and the callers
//     waiting (in the instant between a fast release and its hand-off,
//     Active may show the freed slot).
//
// The race between a waiter giving up and a release handing it the slot is
// settled under the mutex, by the waiter's granted flag: a waiter that was
// not granted is unlinked and can never be handed a slot afterwards; a waiter
// woken by its ctx that was granted passes the slot on as a release would
// and returns ctx.Err() (the wait_timeout rejection if a Deadline's timer
// ended the ctx); a waiter woken by MaxWait that was granted got its
// slot in time, so it keeps it and runs fn.
//
// The uncontended path is a load, a compare-and-swap and, on release, a
// decrement and a load, and allocates nothing; a rejection takes the mutex
// and allocates nothing either. Only waiting allocates: the waiter,
// its 1-buffered channel and, with MaxWait, a timer. They are not pooled on
// purpose: a channel or timer made inside a testing/synctest bubble must not
// be used outside it, and a shared pool would carry them from one bubble (or
// none) to another; next to parking a goroutine, the allocations are cheap.
// No lock is held while fn runs or while user hooks and telemetry run.
package bulkhead
