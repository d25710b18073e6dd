package compose

import (
	"context"
	"fmt"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"
)

type typedErr string

func (e typedErr) Error() string     { return string(e) }
func (e typedErr) ErrorType() string { return string(e) }

// Record options for error types met after New are cached, but only up to
// maxMoreOpts of them.
func TestMoreOptsCapped(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	p, err := New("x", Policies{}, WithMeterProvider(mp), WithTracerProvider(noop.NewTracerProvider()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxMoreOpts {
		e := typedErr(fmt.Sprint("type", i%(2*maxMoreOpts)))
		p.Execute(context.Background(), func(context.Context) error { return e })
	}
	n := 0
	p.moreOpts.Range(func(any, any) bool { n++; return true })
	if n != maxMoreOpts {
		t.Errorf("%d cached error types, want the cap %d", n, maxMoreOpts)
	}
}
