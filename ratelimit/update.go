package ratelimit

// Update changes l's settings to cfg's, checked as New checks them: an
// invalid cfg changes nothing and returns the error New returns for it,
// naming the field. Name, Shared, MeterProvider and OnReject stay those
// New was given; cfg's are ignored.
//
// An attempt reads once, as it enters, which rates it draws from and the
// bounds of its wait. A rate on before and after is retuned in place: it
// keeps its tokens already spent and refills at the new rate from Update
// on, for every attempt that draws from it after; a rate
// turned on starts with a full burst; a rate turned off no longer delays
// attempts. MaxWait and MaxHold bound the waits of the attempts
// that enter after Update returns; an attempt already waiting keeps its
// bounds and what it has reserved. MaxHold caps the holds set after
// Update; a hold already on keeps its end. The hold, the gate and what the
// answers have told them survive. Update is safe for concurrent use with
// attempts and with other Updates.
func (l *Limiter) Update(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	l.upd.Lock()
	defer l.upd.Unlock()
	old := l.cur.Load()
	cfg.Name, cfg.Shared = old.given.Name, old.given.Shared
	cfg.MeterProvider, cfg.OnReject = old.given.MeterProvider, old.given.OnReject
	l.cur.Store(newSettings(cfg, old))
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, with the Name, Shared, MeterProvider and OnReject
// New was given. Its zero fields stay zero, so that passing it to Update changes
// nothing.
func (l *Limiter) Config() Config {
	return l.cur.Load().given
}
