package retry

// Update changes r's settings to cfg's, checked as New checks them: an
// invalid cfg changes nothing and returns the error New returns for it,
// naming the field. Name, MeterProvider, Budget and the hooks (ShouldRetry,
// NewSchedule and OnRetry) stay those New was given; cfg's are ignored.
//
// A call reads its settings once, when it starts. Calls started after
// Update returns use MaxAttempts, InitialInterval, MaxInterval and Jitter
// of cfg; a call in progress, attempting or waiting, ends with the
// settings it started with. The Budget's balance is untouched. Update is
// safe for concurrent use with calls and with other Updates.
func (r *Retry) Update(cfg Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	given := r.cur.Load().given
	cfg.Name, cfg.MeterProvider, cfg.Budget = given.Name, given.MeterProvider, given.Budget
	cfg.ShouldRetry, cfg.NewSchedule, cfg.OnRetry = given.ShouldRetry, given.NewSchedule, given.OnRetry
	s, err := cfg.resolve()
	if err != nil {
		return err
	}
	r.cur.Store(r.settings(cfg, s))
	return nil
}

// Config returns the Config in force: the one given to New or to the
// last Update that succeeded, with the Name, MeterProvider, Budget and
// hooks New was given. Its zero fields stay zero, so that passing it to
// Update changes nothing.
func (r *Retry) Config() Config {
	return r.cur.Load().given
}
