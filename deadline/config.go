package deadline

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
)

// Config configures a [Deadline]. The zero value is not valid: Timeout is
// required.
//
// Config reads and writes JSON: {"timeout": "30s"}. The keys are the json
// tags and durations are Go duration strings; zero fields are left out.
// MeterProvider and OnTimeout are not data: they are neither written nor
// read.
type Config struct {
	// Name is the watertight.policy.name attribute and ExceededError.Name.
	Name string `json:"name"`

	// Timeout is how long fn may run, from the start of each call. It must
	// be > 0.
	Timeout time.Duration `json:"timeout"`

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnTimeout, if not nil, is called when a call ends with an
	// [*ExceededError], before Execute or Timer.Stop returns, on its
	// goroutine. ctx is the context fn ran with. It must be safe for
	// concurrent use.
	OnTimeout func(ctx context.Context, timeout time.Duration) `json:"-"`
}

// MarshalJSON returns c's data fields as a JSON object.
func (c Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(c) }

// UnmarshalJSON reads the JSON object data into c. It refuses what [New]
// refuses, with an error naming the JSON field: "timeout: must be > 0,
// got 0s". A key data leaves out leaves its field as it was; on error c
// is unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, Config.validate)
}

// validate reports the first invalid field of c.
func (c Config) validate() error {
	if c.Timeout <= 0 {
		return fielderr.New("deadline", "Timeout", "must be > 0, got %v", c.Timeout)
	}
	return nil
}
