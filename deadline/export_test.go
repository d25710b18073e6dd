package deadline

// Cause returns the cause of the contexts d creates now.
func (d *Deadline) Cause() error { return d.set.Load().cause }
