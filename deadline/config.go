package deadline

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config configures a [Deadline]. The zero value is not valid: Timeout is
// required. [New] copies it.
type Config struct {
	// Name names the policy in errors and in telemetry (the
	// watertight.policy.name attribute). Empty is allowed.
	Name string

	// Timeout is how long fn may run, from the start of each call. It must
	// be > 0. Any value is safe, math.MaxInt64 included: a deadline beyond
	// the year 2262 sets no timer.
	Timeout time.Duration

	// MeterProvider provides the watertight.timeouts counter. If nil, the
	// global MeterProvider is used.
	MeterProvider metric.MeterProvider

	// OnTimeout, if not nil, is called when the Deadline's own timer fired
	// and fn returned an error other than a rejection. It runs after the
	// timeout has been recorded and before Execute returns, on the
	// caller's goroutine. ctx is the context fn ran with (done by then,
	// with the caller's values and span), and timeout is Config.Timeout.
	// It must be safe for concurrent use.
	OnTimeout func(ctx context.Context, timeout time.Duration)
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("deadline: Config.Timeout must be > 0, got %v", c.Timeout)
	}
	return nil
}
