package deadline

import "errors"

// Update changes the Timeout to cfg's, checked as [New] checks it: an
// invalid cfg changes nothing and returns the error New returns for it.
// Name, MeterProvider and OnTimeout stay those New was given; cfg's are
// ignored. A call keeps the timeout it started with; calls that start
// after the update get the new one. Update is safe for concurrent use
// with calls and with itself. The zero Deadline refuses every update.
func (d *Deadline) Update(cfg Config) error {
	if d.record == nil {
		return errors.New("deadline: Update on the zero Deadline: build one with New")
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set.Store(d.settings(cfg.Timeout))
	d.cfg.Timeout = cfg.Timeout
	return nil
}

// Config returns the Config in force: the one given to New or to the last
// Update that succeeded, with the Name, MeterProvider and OnTimeout New
// was given. It is the zero Config for the zero Deadline.
func (d *Deadline) Config() Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}
