// Package bench holds side-by-side benchmarks of watertight against
// failsafe-go v0.9.8, and the floors (the cost of the standard library,
// gobreaker and OpenTelemetry doing the same work by hand) that watertight's
// per-call overhead is judged against. Everything is in _test.go files and
// run by run.sh; see README.md. It is a module of its own so that
// failsafe-go never enters watertight's go.mod.
package bench
