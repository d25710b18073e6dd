package bulkhead

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/policy"
)

// Unbounded, as Config.MaxQueue, lets any number of callers wait for a slot.
const Unbounded = -1

// Config configures a [Bulkhead]. The zero value is not valid: Limit must
// be set. [New] copies it.
type Config struct {
	// Name names the bulkhead in errors and telemetry. Empty is allowed.
	Name string

	// Limit is the number of calls that may run at once. It is required and
	// must be >= 1; math.MaxInt is allowed.
	Limit int

	// MaxQueue is the number of calls that may wait for a slot when all
	// Limit slots are taken. 0 means none: a call that finds the bulkhead
	// full is rejected at once. [Unbounded] lets any number wait. Any other
	// negative value is invalid.
	MaxQueue int

	// MaxWait is how long one waiting call may wait for a slot before it is
	// rejected with reason "wait_timeout". 0 means it waits until its
	// context is done. Negative values are invalid.
	MaxWait time.Duration

	// Reserve keeps slots for calls of a priority (policy.WithPriority) and
	// above: with Reserve[policy.PriorityCritical] = 10, only critical calls
	// take the last 10 free slots. Only PriorityDefault and PriorityCritical
	// may reserve, no count may be negative, and at least one slot must stay
	// open to every call. Nil reserves nothing.
	Reserve map[policy.Priority]int

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called once for every rejection, holding no
	// lock, on the rejected caller's goroutine, with its ctx and the error
	// Execute returns. It must not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	if c.Limit < 1 {
		return fmt.Errorf("bulkhead: Config.Limit must be >= 1, got %d", c.Limit)
	}
	return slots.CheckConfig("bulkhead", c.MaxQueue, c.MaxWait, c.Reserve, c.Limit)
}
