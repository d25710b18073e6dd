// Package stage holds what this module's policies share about one call
// and its attempts: the outcome a policy is given when fn panicked
// ([ErrAborted]), and the record of an attempt's answer ([Attempt]), which
// httppolicy's Transport marks and an adaptive limit samples, and whether
// an attempt follows one that ran fn ([Retried]).
package stage
