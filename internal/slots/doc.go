// Package slots is the admission core of package bulkhead and package
// adaptive: a count of slots held against a limit that may change, and a
// bounded FIFO queue of callers waiting for a slot, with a lock-free path
// while nobody waits. With a fair share, each class of the queue is served
// key by key, round robin, and a key's slots may be capped.
//
// It records no telemetry and calls no hook: [Slots.Acquire] returns an
// [Outcome], and the caller records its own rejections with no lock held.
// doc/design.md ("The bulkhead's queue") gives the reasoning: the FIFO
// hand-off, the O(1) removal of a waiter that gives up, how a limit
// lowered drains, and why waiters are not pooled; "A fair share by key"
// gives that of the keys.
package slots
