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
// # Outcomes
//
//	outcome                                 error returned                    counted
//	--------------------------------------  --------------------------------  ------------------------------------------
//	slot free, or given one while waiting   fn's error, unchanged             -
//	queue full (or MaxQueue 0) and no slot  rejection, Reason "full"          watertight.rejections{reason=full}
//	MaxWait passed while waiting            rejection, Reason "wait_timeout"  watertight.rejections{reason=wait_timeout}
//	a higher priority took its place in     rejection, Reason "shed"          watertight.rejections{reason=shed}
//	the full queue while it waited
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
// [Bulkhead.Update] changes Limit, MaxQueue, MaxWait and Reserve while
// calls run; [Bulkhead.Config] returns the settings in force. An
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
//
// # Concurrency
//
// A Bulkhead is safe for concurrent use. It keeps these promises:
//
//   - FIFO hand-off. A caller arriving as a slot is freed cannot jump the
//     queue of its priority. No slot sits free while someone waits who may
//     take it.
//   - A waiter that gives up leaves the queue in constant time.
//   - Once calls settle, Active and Queued are exact.
//   - A waiter handed a slot as its ctx ends passes the slot on and returns
//     ctx.Err() (or the wait_timeout rejection if a Deadline's timer ended
//     the ctx). A waiter handed a slot as MaxWait passes keeps it.
//   - While nobody waits, taking and freeing a slot takes no lock and
//     allocates nothing; neither does a rejection.
//   - No lock is held while fn, user hooks or telemetry run.
package bulkhead
