package bulkhead

import (
	"fmt"
	"maps"
)

// Update changes the bulkhead's Limit, MaxQueue, MaxWait, Reserve and
// MaxPerKey to cfg's, checked as [New] checks them: an invalid cfg changes
// nothing and returns the error New returns for it. Name, MeterProvider
// and OnReject stay those New was given; cfg's are ignored. Update cannot
// change FairShare: a cfg whose FairShare differs changes nothing and
// returns an error naming FairShare, since the waiters are filed by key
// or not as they queue; build a new Bulkhead for that.
//
// An admission sees the old settings or the new, never a mix. Calls
// already admitted keep their slots: a lower Limit admits no call until
// fewer calls than it run, and a higher one hands its new slots to the
// waiters at once. Callers already waiting keep their place and their
// MaxWait: a shorter queue turns newcomers away until it is below its new
// size (but for one that takes the place of a waiter of a lower priority,
// as in a full queue), and a new MaxWait applies to those who queue after
// the update. A new MaxPerKey counts the slots a key holds under a cap,
// the old one's included, and revokes none; slots taken while no cap was
// set do not count against it.
// Update is safe for concurrent use with calls and with itself.
func (b *Bulkhead) Update(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.FairShare != b.slots.Fair() {
		return fmt.Errorf("bulkhead: Config.FairShare cannot be changed (from %v to %v): build a new Bulkhead", !cfg.FairShare, cfg.FairShare)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.Config()
	in.Limit, in.MaxQueue, in.MaxWait, in.Reserve = cfg.Limit, cfg.MaxQueue, cfg.MaxWait, maps.Clone(cfg.Reserve)
	in.MaxPerKey = cfg.MaxPerKey
	b.slots.Set(cfg.Limit, cfg.MaxQueue, cfg.MaxWait, cfg.Reserve, cfg.keys())
	b.cfg.Store(&in)
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, with the Name, MeterProvider and OnReject New was
// given. Its Reserve is a copy.
func (b *Bulkhead) Config() Config {
	c := *b.cfg.Load()
	c.Reserve = maps.Clone(c.Reserve)
	return c
}
