package breaker

import (
	"cmp"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
)

// rules are a Breaker's settings in force, never changed once published.
type rules struct {
	cfg         Config             // as given, with the Name, MeterProvider and hooks given to New
	st          gobreaker.Settings // without OnStateChange
	openTimeout time.Duration
}

// newRules checks cfg as New does and returns its rules.
func newRules(cfg Config) (*rules, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	return &rules{cfg: cfg, st: st, openTimeout: cmp.Or(cfg.OpenTimeout, DefaultOpenTimeout)}, nil
}

// Update changes the breaker's settings to cfg's, checked as New checks
// them: an invalid cfg changes nothing and returns the error New returns
// for it, naming the field. Name, MeterProvider and the hooks (IsFailure,
// OnReject, OnStateChange) stay those New was given; cfg's are ignored.
// Update cannot turn the slow rule on or off: a cfg whose SlowCallRatio
// is 0 when New's was not, or the reverse, changes nothing and returns an
// error naming SlowCallRatio; build a new Breaker for that.
//
// An update never changes the state, never resets the counts and never
// ends an open period, [Breaker.ForceOpen] or [Breaker.OpenUntil]. It
// does not judge the trip rules itself. Calls in flight run on; their
// outcomes are judged by the rules in force when they end. No call waits
// in a Breaker.
//
//   - ConsecutiveFailures, FailureRatio and MinRequests apply at once: the
//     next failure is judged by them, on the counts so far. Counts already
//     past the new rules trip the breaker at that failure.
//   - OpenTimeout applies from the next opening; an open period under way
//     keeps its end.
//   - Window and HalfOpenRequests apply from the next period, as
//     gobreaker fixes them per period: a closed breaker counts in its old
//     window until it opens, and the probes after an open period under
//     way stay as many. [Breaker.Reset] and [Breaker.OpenUntil] start a
//     period with them at once.
//   - SlowCallRatio and SlowCallMinCalls apply at the rule's next judgment.
//     SlowCallDuration applies at once, to the calls being timed too: a
//     call that has run longer than a shorter duration is judged slow at
//     once, by the timer, which may trip the breaker. The one timer judges
//     calls in the order they came, which holds only if they share one
//     duration. A call judged slow stays slow.
//
// Update is safe for concurrent use with every method.
func (b *Breaker) Update(cfg Config) error {
	b.update.Lock()
	defer b.update.Unlock()
	old := b.rules.Load()
	cfg.Name, cfg.MeterProvider = old.cfg.Name, old.cfg.MeterProvider
	cfg.IsFailure, cfg.OnReject, cfg.OnStateChange = old.cfg.IsFailure, old.cfg.OnReject, old.cfg.OnStateChange
	r, err := newRules(cfg)
	if err != nil {
		return err
	}
	if (cfg.SlowCallRatio > 0) != (b.slow != nil) {
		// The slow rule's timer, clock and per-period counts are built
		// with the Breaker: a period begun without them cannot judge it.
		return fmt.Errorf("breaker: Config.SlowCallRatio cannot turn the slow rule on or off (from %v to %v): build a new Breaker",
			old.cfg.SlowCallRatio, cfg.SlowCallRatio)
	}
	if b.slow != nil {
		b.slow.update(cfg.SlowCallDuration, cfg.SlowCallRatio, cmp.Or(cfg.SlowCallMinCalls, DefaultMinRequests))
	}
	b.rules.Store(r)
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, with the Name, MeterProvider and hooks New was
// given. It is safe for concurrent use.
func (b *Breaker) Config() Config { return b.rules.Load().cfg }

// update sets the slow rule's duration, ratio and minimum. A shorter
// duration may bring the oldest call's judgment forward: the timer is
// armed for it. A longer one lets the timer fire early; it then arms
// itself again.
func (w *slowWatch) update(d time.Duration, ratio float64, minCalls uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d, w.ratio, w.min = d, ratio, minCalls
	calls := w.calls()
	if len(calls) == 0 {
		return
	}
	now := time.Since(w.base)
	if at := max(time.Duration(calls[0].start)+d, now); at < w.at {
		w.arm(now, at)
	}
}
