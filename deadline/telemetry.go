package deadline

import "context"

// exceeded records a timeout that cut fn short, calls the hook and returns
// the error the call ends with.
func (d *Deadline) exceeded(ctx context.Context, err error) error {
	d.record.Record(ctx)
	if d.onTimeout != nil {
		d.onTimeout(ctx, d.timeout)
	}
	return &ExceededError{Name: d.name, Duration: d.timeout, Err: err}
}
