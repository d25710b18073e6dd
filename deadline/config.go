package deadline

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config configures a [Deadline]. The zero value is not valid: Timeout is
// required.
type Config struct {
	// Name is the watertight.policy.name attribute and ExceededError.Name.
	Name string

	// Timeout is how long fn may run, from the start of each call. It must
	// be > 0.
	Timeout time.Duration

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnTimeout, if not nil, is called when a call ends with an
	// [*ExceededError], before Execute or Timer.Stop returns, on its
	// goroutine. ctx is the context fn ran with. It must be safe for
	// concurrent use.
	OnTimeout func(ctx context.Context, timeout time.Duration)
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("deadline: Config.Timeout must be > 0, got %v", c.Timeout)
	}
	return nil
}
