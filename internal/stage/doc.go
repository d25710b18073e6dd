// Package stage holds what this module's policies share about one call
// and its attempts: the outcome a policy is given when fn panicked
// ([ErrAborted]), and the clock that marks when an attempt's answer
// arrived ([AnswerClock]), which httppolicy's Transport sets and an
// adaptive limit reads.
package stage
