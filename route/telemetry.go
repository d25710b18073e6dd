package route

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/watertight/watertight/internal/telemetry"
)

const eventPicked = "watertight.route.picked"

// recorder holds a Router's instruments and attribute sets, built at New.
type recorder struct {
	picks, ejections, returns metric.Int64Counter
	opts                      [][]metric.AddOption // by endpoint
	obsOpts                   []metric.ObserveOption
	events                    [][]attribute.KeyValue
}

func newRecorder(in *telemetry.Instruments, r *Router) recorder {
	m := in.Meter
	rec := recorder{
		picks:     telemetry.Counter(m, telemetry.MetricRoutePicks, "{attempt}", "Attempts sent to each endpoint."),
		ejections: telemetry.Counter(m, telemetry.MetricEjections, "{ejection}", "Endpoints ejected as latency outliers."),
		returns:   telemetry.Counter(m, telemetry.MetricReturns, "{return}", "Endpoints brought back after they were out."),
	}
	for i := range r.eps {
		kv := append(telemetry.PolicyAttrs(Kind, r.name), telemetry.KeyEndpoint.String(r.eps[i].picked.Name))
		rec.opts = append(rec.opts, telemetry.AddOptions(kv...))
		rec.obsOpts = append(rec.obsOpts, metric.WithAttributeSet(attribute.NewSet(kv...)))
		rec.events = append(rec.events, kv)
	}
	g, err := m.Float64ObservableGauge(telemetry.MetricRouteLoad, metric.WithUnit("s"), metric.WithDescription(
		"Each endpoint's load score: its latency estimate in seconds times its calls in flight plus one, over its weight."))
	if err != nil {
		otel.Handle(err)
	} else {
		r.obs.Register(m, func(_ context.Context, o metric.Observer) error {
			now, s := r.now(), r.set.Load()
			for i := range r.eps {
				o.ObserveFloat64(g, r.eps[i].load(now, s.eps[i].weight, s.ramp, false)/1e9, rec.obsOpts[i])
			}
			return nil
		}, g)
	}
	return rec
}

// picked counts a pick of endpoint i, and adds an event to the span in
// ctx if it is recording.
func (rec *recorder) picked(ctx context.Context, i int) {
	rec.picks.Add(ctx, 1, rec.opts[i]...)
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(eventPicked, trace.WithAttributes(rec.events[i]...))
	}
}

func (rec *recorder) ejectedOne(i int) { rec.ejections.Add(context.Background(), 1, rec.opts[i]...) }

func (rec *recorder) returned(i int32) { rec.returns.Add(context.Background(), 1, rec.opts[i]...) }
