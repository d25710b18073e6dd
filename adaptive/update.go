package adaptive

import (
	"fmt"
	"maps"
)

// Update changes the limiter's settings to cfg's, checked as [New] checks
// them: an invalid cfg changes nothing and returns the error New returns
// for it. Name, MeterProvider and OnReject stay those New was given;
// cfg's are ignored. InitialLimit only starts a limiter, so an update
// keeps the learned limit, clamped to the new MinLimit and MaxLimit.
//
// An admission sees the old settings or the new, never a mix. Calls
// already admitted keep their slots, waiters their place and their
// MaxWait, as in package bulkhead: a lower limit admits nobody until
// fewer calls than it run, a shorter queue turns newcomers away until it
// is below its new size (but for one that takes the place of a waiter of
// a lower priority, as in a full queue), and a new MaxWait applies to
// callers who queue after the update. A new MaxPerKey counts the slots
// a key holds under a cap, the old one's included; those taken with no
// cap set do not count. Update cannot change FairShare: a cfg whose
// FairShare differs changes nothing and returns an error naming
// FairShare; build a new Limiter for that. A probe in progress goes on
// with the new bounds. The learned limit and the no-load latency survive.
// Update is safe for concurrent use with calls and with itself.
func (l *Limiter) Update(cfg Config) error {
	r, err := cfg.resolve()
	if err != nil {
		return err
	}
	if cfg.FairShare != l.slots.Fair() {
		return fmt.Errorf("adaptive: Config.FairShare cannot be changed (from %v to %v): build a new Limiter", !cfg.FairShare, cfg.FairShare)
	}
	l.upd.Lock()
	defer l.upd.Unlock()
	l.mu.Lock()
	c := &l.ctl
	c.cfg = r
	c.probeLimit = min(max(probeConcurrency, r.MinLimit), r.MaxLimit)
	c.limit = min(max(c.limit, float64(r.MinLimit)), float64(r.MaxLimit))
	c.held = min(max(c.held, r.MinLimit), r.MaxLimit)
	admission := c.held
	if l.probing.Load() {
		admission = l.probeAdmission()
	}
	l.learned.Store(int64(c.held))
	l.maxLimit.Store(int64(r.MaxLimit))
	l.slots.Set(admission, r.MaxQueue, r.MaxWait, r.Reserve, r.keys())
	l.mu.Unlock()
	in := *l.cfg.Load()
	in.MinLimit, in.MaxLimit, in.InitialLimit = cfg.MinLimit, cfg.MaxLimit, cfg.InitialLimit
	in.MaxQueue, in.MaxWait, in.Reserve = cfg.MaxQueue, cfg.MaxWait, maps.Clone(cfg.Reserve)
	in.MaxPerKey = cfg.MaxPerKey
	in.Tolerance, in.ProbeInterval = cfg.Tolerance, cfg.ProbeInterval
	l.cfg.Store(&in)
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, as given (zero fields stay zero), with the Name,
// MeterProvider and OnReject New was given. Its Reserve is a copy.
func (l *Limiter) Config() Config {
	c := *l.cfg.Load()
	c.Reserve = maps.Clone(c.Reserve)
	return c
}
