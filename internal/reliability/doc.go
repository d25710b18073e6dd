// Package reliability holds watertight's cross-package reliability suite:
// a soak of the full pipeline, faults around the library (telemetry
// exporters down or slow, an upstream that never answers, a fn that ignores
// its ctx, a half-open probe that panics or exits its goroutine), and bad
// input (invalid configs, nil arguments, extreme values). It has no API:
// everything is in its tests.
package reliability
