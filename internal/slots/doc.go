// Package slots is the admission core shared by package bulkhead and
// package adaptive: a count of slots held against a limit that may change,
// and a bounded FIFO queue of callers waiting for a slot, with a lock-free
// path while nobody waits.
//
// It records no telemetry and calls no hook: [Slots.Acquire] returns an
// [Outcome], and the caller records its own rejections (after Acquire has
// returned, so that no lock is held while user code or telemetry runs).
//
// # Concurrency design
//
// The state is a count of held slots and a count of waiters (both atomic),
// the limit (atomic), and, under a mutex, an intrusive doubly linked list of
// waiters. A buffered channel used as a semaphore (the usual Go bulkhead)
// would be simpler, but it cannot give what this package promises:
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
//   - A limit that moves. [Slots.SetLimit] stores the new limit under the
//     mutex. Raising it hands the new free slots to the oldest waiters at
//     once. Lowering it revokes nothing: the calls in flight finish, and
//     while more slots are held than the limit allows a release frees its
//     slot instead of handing it to a waiter, so that the calls in flight
//     drain to the new limit before anyone else is admitted. A fast-path
//     acquire that read the old limit an instant before SetLimit may still
//     be admitted under it: a new limit applies to the acquires that start
//     after SetLimit returns.
//
// The race between a waiter giving up and a release handing it the slot is
// settled under the mutex, by the waiter's granted flag: a waiter that was
// not granted is unlinked and can never be handed a slot afterwards; a waiter
// woken by its ctx that was granted passes the slot on as a release would
// and returns ctx.Err() (the wait_timeout rejection if a Deadline's timer
// ended the ctx); a waiter woken by MaxWait that was granted got its
// slot in time, so it keeps it and the call runs.
//
// The uncontended path is three loads, a compare-and-swap and, on release,
// a decrement and a load, and allocates nothing; a rejection takes the mutex
// and allocates nothing either. Only waiting allocates: the waiter, its
// 1-buffered channel and, with MaxWait, a timer. They are not pooled on
// purpose: a channel or timer made inside a testing/synctest bubble must not
// be used outside it, and a shared pool would carry them from one bubble (or
// none) to another; next to parking a goroutine, the allocations are cheap.
package slots
