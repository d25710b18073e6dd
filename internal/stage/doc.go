// Package stage holds what this module's policies share about one call
// and its attempts: the record of an attempt in its context, which a retry
// and a hedge number ([Retry], [Hedge]), httppolicy's Transport marks
// ([Answered]) and an adaptive limit samples ([Sample]); whether a wait
// that a timer ended is a rejection ([WaitRefused]); and the mark of a
// retry that gave up ([ErrGaveUp]).
package stage
