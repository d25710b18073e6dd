package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// SetupConfig says which exporters [Setup] wires. Its zero value gives the
// Prometheus endpoint only: no stdout spans, and OTLP only if the standard
// environment variables ask for it.
type SetupConfig struct {
	// ServiceName is the service.name resource attribute. Empty means
	// "watertight-telemetry" (OTEL_SERVICE_NAME, if set, wins over both).
	ServiceName string

	// SpanWriter, if not nil, receives every span as JSON from the stdout
	// trace exporter (one object per line, or indented if PrettySpans).
	SpanWriter  io.Writer
	PrettySpans bool

	// OTLPOptions are extra options for the OTLP/HTTP trace exporter. The
	// exporter is created only when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; it reads those and the
	// other OTEL_EXPORTER_OTLP_* variables itself, and these options win
	// over them.
	OTLPOptions []otlptracehttp.Option
}

// Telemetry is the OpenTelemetry SDK wired by [Setup]: hand TracerProvider
// and MeterProvider to watertight (compose.WithTracerProvider,
// compose.WithMeterProvider and each policy's Config.MeterProvider) and
// serve Handler as /metrics. All its fields are safe for concurrent use.
type Telemetry struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// Registry holds the OpenTelemetry metrics as Prometheus collects them.
	Registry *prometheus.Registry
	// Handler serves Registry in the Prometheus exposition format.
	Handler http.Handler
	// OTLP says whether the OTLP/HTTP trace exporter is on.
	OTLP bool
}

// otlpEnabled reports whether the environment names an OTLP endpoint for
// traces. Without one, otlptracehttp would send to localhost:4318 and log an
// error on every batch when no collector listens there.
func otlpEnabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup builds a TracerProvider with a batch span processor per exporter
// (stdout if cfg.SpanWriter is set, OTLP/HTTP if the environment names an
// endpoint) and a MeterProvider read by the Prometheus exporter into a fresh
// registry. It sets no global provider. shutdown flushes pending spans and
// stops both providers; call it once, with a ctx that bounds the flush. On
// error, whatever Setup had started is shut down already.
func Setup(ctx context.Context, cfg SetupConfig) (tel *Telemetry, shutdown func(context.Context) error, err error) {
	name := cfg.ServiceName
	if name == "" {
		name = "watertight-telemetry"
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the name given here.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	var shutdowns []func(context.Context) error
	shutdownAll := func(ctx context.Context) error {
		var errs []error
		// Last started, first stopped.
		for i := len(shutdowns) - 1; i >= 0; i-- {
			errs = append(errs, shutdowns[i](ctx))
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, shutdownAll(ctx))
		}
	}()

	tracerOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.SpanWriter != nil {
		opts := []stdouttrace.Option{stdouttrace.WithWriter(cfg.SpanWriter)}
		if cfg.PrettySpans {
			opts = append(opts, stdouttrace.WithPrettyPrint())
		}
		exp, err := stdouttrace.New(opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: stdout trace exporter: %w", err)
		}
		tracerOpts = append(tracerOpts, sdktrace.WithBatcher(exp))
	}
	tel = &Telemetry{}
	if otlpEnabled() {
		exp, err := otlptracehttp.New(ctx, cfg.OTLPOptions...)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		tracerOpts = append(tracerOpts, sdktrace.WithBatcher(exp))
		tel.OTLP = true
	}
	tel.TracerProvider = sdktrace.NewTracerProvider(tracerOpts...)
	shutdowns = append(shutdowns, tel.TracerProvider.Shutdown)

	// The exporter is a metric Reader: each scrape of Handler collects
	// the MeterProvider's current values into the registry's output.
	tel.Registry = prometheus.NewRegistry()
	// Without scope info: the exporter would add otel_scope_name,
	// otel_scope_version and an empty otel_scope_schema_url to every
	// series. Every watertight_* metric has the one scope
	// (github.com/watertight/watertight, at its instrumentation version),
	// so the labels tell nothing apart; target_info keeps the resource.
	promExp, err := otelprom.New(otelprom.WithRegisterer(tel.Registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: Prometheus exporter: %w", err)
	}
	tel.MeterProvider = sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(promExp),
	)
	shutdowns = append(shutdowns, tel.MeterProvider.Shutdown)
	tel.Handler = promhttp.HandlerFor(tel.Registry, promhttp.HandlerOpts{})
	return tel, shutdownAll, nil
}
