package hedge

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/retry"
)

// The values of zero [Config] fields and the largest MaxHedges. A learned
// delay is computed from the last window latencies, once there are
// minSamples, as failsafe-go's quantile hedge is by default.
const (
	defaultMaxHedges = 1
	defaultQuantile  = 0.9
	maxHedgesLimit   = 100
	window           = 1000
	minSamples       = 20
)

// Config configures a [Hedge]. The zero value is valid: one hedge,
// started when the first attempt fails, or when it has run longer than
// the 90th percentile of the last 1000 latencies. No hedge starts on
// delay until 20 latencies are known. [New] copies it.
type Config struct {
	// Name names the Hedge in errors and telemetry. Empty is allowed.
	Name string

	// MaxHedges is the number of attempts that may start beside the first.
	// Zero means 1; otherwise it must be in [1, 100].
	MaxHedges int

	// Delay, with Quantile zero, is the fixed delay between the starts of
	// attempts. With a Quantile, it is the least delay: the delay used
	// until 20 latencies are known (zero means no hedge on delay until
	// then), and the floor of the learned delay. It must be >= 0.
	Delay time.Duration

	// Quantile, if set, learns the delay: that quantile of the latencies
	// of the last 1000 attempts, at least Delay. Zero means 0.9 when Delay
	// is zero, and a fixed Delay otherwise; else it must be in (0, 1). The
	// latencies are those of successes, and of losers canceled after
	// running longer than the delay.
	Quantile float64

	// Budget, if set, is drawn on by every hedge, and each call deposits
	// into it. Once it refuses a hedge, the call starts no more. Nil means
	// no budget.
	Budget *retry.Budget

	// ShouldRetry, if set, is asked about each failure the fixed rules
	// have not settled. True starts the next hedge at once; false ends the
	// call with that error. Nil means true. It runs on the caller's
	// goroutine and may be called concurrently by different calls.
	ShouldRetry func(error) bool

	// MeterProvider provides the counters. Nil means the global provider.
	MeterProvider metric.MeterProvider

	// OnHedge, if set, is called as each hedge starts, with its attempt
	// number and whether a failure (not the delay) started it. It runs on
	// the caller's goroutine and may be called concurrently by different
	// calls.
	OnHedge func(ctx context.Context, attempt int, afterFailure bool)
}

// resolve returns cfg with its defaults filled in, Quantile 0 meaning a
// fixed delay, or an error naming the first invalid field.
func (cfg Config) resolve() (Config, error) {
	s := cfg
	s.MaxHedges = cmp.Or(s.MaxHedges, defaultMaxHedges)
	if s.MaxHedges < 1 || s.MaxHedges > maxHedgesLimit {
		return s, fmt.Errorf("hedge: Config.MaxHedges must be in [1, %d], got %d", maxHedgesLimit, cfg.MaxHedges)
	}
	if s.Delay < 0 {
		return s, fmt.Errorf("hedge: Config.Delay must be >= 0, got %v", cfg.Delay)
	}
	if s.Quantile == 0 && s.Delay == 0 {
		s.Quantile = defaultQuantile
	}
	if s.Quantile != 0 && !(s.Quantile > 0 && s.Quantile < 1) { // NaN fails too
		return s, fmt.Errorf("hedge: Config.Quantile must be in (0, 1), got %v", cfg.Quantile)
	}
	return s, nil
}
