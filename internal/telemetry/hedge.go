package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Telemetry names of a hedge (retry.Hedge): the kind, its counter, its
// attributes and its span event.
const (
	// KindHedge is the watertight.policy.kind of a hedge.
	KindHedge = "hedge"
	// MetricHedges counts hedges (attempts started beside a call's
	// first) by outcome, one of the Hedge* values below.
	MetricHedges = "watertight.hedges"
	// KeyHedgeOutcome is the outcome of a hedge on watertight.hedges.
	KeyHedgeOutcome = attribute.Key("watertight.hedge.outcome")
	// EventHedge is the span event a hedge's start adds to the span in
	// the call's ctx, with its attempt number (KeyAttempt) and
	// KeyHedgeAfterFailure.
	EventHedge = "watertight.hedge"
	// KeyHedgeAfterFailure says, on a watertight.hedge event, whether a
	// failure (rather than the delay) started the hedge.
	KeyHedgeAfterFailure = attribute.Key("watertight.hedge.after_failure")
)

// Values of KeyHedgeOutcome.
const (
	// HedgeWon: the hedge's success is the call's.
	HedgeWon = "won"
	// HedgeLost: another attempt won while the hedge ran.
	HedgeLost = "lost"
	// HedgeCanceled: the call ended otherwise while the hedge ran (the
	// caller's context, another attempt's fatal error).
	HedgeCanceled = "canceled"
	// HedgeFailed: the hedge failed on its own before the call ended.
	HedgeFailed = "failed"
)

// HedgeCounter returns the watertight.hedges counter of m; if its creation
// fails, the error goes to otel.Handle and the counter returned is the
// no-op one the API leaves in its place.
func HedgeCounter(m metric.Meter) metric.Int64Counter {
	c, err := m.Int64Counter(MetricHedges, metric.WithUnit("{attempt}"),
		metric.WithDescription("Hedged attempts (attempts started beside a call's first), by outcome."))
	handle(err)
	return c
}
