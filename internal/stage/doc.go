// Package stage holds what this module's policies share about one call
// and its attempts: the record of an attempt ([Attempt]), which a retry
// and a hedge number, httppolicy's Transport marks and an adaptive limit
// samples; whether a wait that a timer ended is a rejection
// ([WaitRefused]); and the mark of a retry that gave up ([ErrGaveUp]).
package stage
