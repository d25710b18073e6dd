package stage

import "errors"

// ErrAborted is the outcome a policy's second step is given in place of
// fn's error when fn panicked or called runtime.Goexit. A breaker counts
// it as a failure; every policy frees what it holds; the panic then goes
// on up the stack.
var ErrAborted = errors.New("stage: fn panicked or exited its goroutine")

// ErrGaveUp is matched by a retry's exhaustion. A retry gives up only while
// its context is live, so a Deadline whose timer fires just after returns
// the exhaustion unchanged, as it does a rejection: one call, one outcome.
var ErrGaveUp = errors.New("stage: the retry gave up")
