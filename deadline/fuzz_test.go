package deadline_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
)

// FuzzConfig builds a Config from fuzzed fields and checks that New never
// panics and either returns a Deadline that runs a call (and, for a timeout
// of up to an hour, cuts a call that waits on ctx exactly at the timeout, in
// fake time), or an error "deadline: Config.Timeout ..." exactly when
// Timeout <= 0.
func FuzzConfig(f *testing.F) {
	for _, d := range []int64{0, -1, 1, int64(time.Second), math.MaxInt64, math.MinInt64, int64(time.Hour)} {
		f.Add("fuzz", d)
	}
	f.Fuzz(func(t *testing.T, name string, timeout int64) {
		cfg := deadline.Config{Name: name, Timeout: time.Duration(timeout)}
		d, err := deadline.New(cfg)
		if timeout <= 0 {
			if err == nil || d != nil {
				t.Fatalf("New(%+v) = %v, %v; want an error", cfg, d, err)
			}
			if !strings.HasPrefix(err.Error(), "deadline: Config.Timeout ") {
				t.Fatalf("error %q does not name Config.Timeout", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		if err := d.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Execute = %v", err)
		}
		if timeout > int64(time.Hour) {
			return
		}
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			err := d.Execute(context.Background(), func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			})
			if !errors.Is(err, deadline.ErrExceeded) {
				t.Fatalf("Execute = %v; want ErrExceeded", err)
			}
			if got := time.Since(start); got != time.Duration(timeout) {
				t.Fatalf("cut after %v; want %v", got, time.Duration(timeout))
			}
		})
	})
}
