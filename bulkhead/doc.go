// Package bulkhead limits how many calls to one dependency run at once, so
// that a slow dependency cannot take every goroutine, socket or server slot
// and starve calls that do not need it.
//
// A [Bulkhead] has Config.Limit slots. A call that finds a free slot takes
// it and runs. A call that finds none waits in a FIFO queue of at most
// Config.MaxQueue callers, for at most Config.MaxWait. It is rejected at
// once when the queue is full. A slot freed by a finished call goes
// straight to the oldest waiter (of the highest priority waiting, below).
//
// # Priority
//
// A call may carry a [policy.Priority] in its ctx ([policy.WithPriority]);
// without one it is PriorityDefault. Waiters are served highest priority
// first, first come first served within a priority. A call that finds the
// queue full takes the place of the newest waiter of the lowest priority
// below its own, which is rejected at once with Reason "shed". Config.Reserve
// keeps slots that only a priority and those above it may take, so that
// long calls of a low priority can never hold every slot. Without Reserve
// and without waiters, a priority changes nothing. There is no ageing (see
// [policy.Priority]).
//
// # Fair share by key
//
// With Config.FairShare, the waiters of each priority are served key by
// key ([policy.WithKey]): a slot freed goes to the oldest waiter of the
// next key in turn, round robin over the keys that have waiters, so that
// a tenant with 500 waiters and one with 1 get the slots freed in turn.
// Calls without a key are one key. Round robin, not deficit round robin:
// every call costs one slot, so a quantum of cost would change nothing. A
// higher priority is still served first.
//
// A full queue sheds within the keys too. A newcomer of a higher priority
// takes, in the lowest priority below its own that has waiters, the place
// of the newest waiter of the key with the most waiters there. Failing
// that, a newcomer takes the place of the newest waiter of the key with
// the most waiters of its own priority, if that key has more waiters than
// the newcomer's key would have with it; otherwise it is rejected "full".
// Of keys with as many waiters, the one whose turn comes last loses one.
//
// Config.MaxPerKey caps the slots one key holds at once: a key at its cap
// waits while other keys take the free slots, its turn passed over until
// it frees one. When every key waiting at a priority is at its cap, a
// lower priority takes the slot: a cap leaves no slot free that a waiter
// may take. A call whose key is at its cap and that may not wait is
// rejected "key_full". The state of a key lasts while it has a waiter or
// a counted slot: keys invented by a caller leave nothing behind.
//
// The fair share costs nothing while nobody waits; the path with nobody
// waiting takes no lock. MaxPerKey takes the bulkhead's lock on every
// call, to count the key's slots.
//
// # Outcomes
//
//	outcome                                 error returned                    counted
//	--------------------------------------  --------------------------------  ------------------------------------------
//	slot free, or given one while waiting   fn's error, unchanged             -
//	queue full (or MaxQueue 0) and no slot  rejection, Reason "full"          watertight.rejections{reason=full}
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
// A call that never ran fn ends as a rejection or as the caller's ctx
// error, never as a timeout.
//
// A rejection matches [ErrFull] and [policy.ErrRejected] with errors.Is. It
// is a *[policy.RejectedError] with Kind "bulkhead", the Config.Name and
// the Reason. One error value is shared per reason, so rejecting allocates
// nothing; do not modify it. Each rejection is counted, added as an event
// to the recording span in ctx, and passed to Config.OnReject. The
// up-down counters watertight.bulkhead.active and watertight.bulkhead.queued
// report [Bulkhead.Active] and [Bulkhead.Queued] until [Bulkhead.Close].
//
// [Bulkhead.Acquire] takes a slot for longer than one function call, such
// as a websocket. A panic or runtime.Goexit in fn frees its slot; the panic
// goes on up the stack.
//
// # Changing settings
//
// [Bulkhead.Update] changes Limit, MaxQueue, MaxWait, Reserve and
// MaxPerKey while calls run; [Bulkhead.Config] returns the settings in
// force. FairShare is fixed at New: the waiters are filed by key, or not,
// as they queue. An
// admission sees the old settings or the new, never a mix. No call is
// cut or shed by an update:
//
//   - A lower Limit revokes no slot: nobody is admitted until fewer calls
//     than the new Limit run. A higher Limit hands its new slots to the
//     waiters at once.
//   - A shorter queue drops no waiter by itself: it turns newcomers away
//     until the queue is below its new size. A newcomer may still take the
//     place of a waiter of a lower priority, as in a full queue.
//   - A new MaxWait applies to the callers who queue after the update;
//     those already waiting keep theirs.
//   - A new Reserve applies to the next admission.
//   - A new MaxPerKey counts the slots each key holds under a cap, the
//     old one's included (slots taken with no cap set do not count); a
//     lower one revokes none, a higher one hands the slots it opens to
//     the waiters at once.
//
// # Concurrency
//
// A Bulkhead is safe for concurrent use. It keeps these promises:
//
//   - FIFO hand-off. A caller arriving as a slot is freed cannot jump the
//     queue of its priority (with FairShare, of its key). No slot sits free
//     while someone waits who may take it.
//   - A waiter that gives up leaves the queue in constant time.
//   - Once calls settle, Active and Queued are exact.
//   - A waiter handed a slot as its ctx ends passes the slot on and returns
//     ctx.Err() (or the wait_timeout rejection if a Deadline's timer ended
//     the ctx). A waiter handed a slot as MaxWait passes keeps it.
//   - While nobody waits, taking and freeing a slot takes no lock and
//     allocates nothing; neither does a rejection.
//   - No lock is held while fn, user hooks or telemetry run.
package bulkhead
