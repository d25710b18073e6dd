package stage

import "errors"

// ErrGaveUp is matched by a retry's exhaustion. A retry gives up only while
// its context is live, so a Deadline whose timer fires just after returns
// the exhaustion unchanged, as it does a rejection: one call, one outcome.
var ErrGaveUp = errors.New("stage: the retry gave up")
