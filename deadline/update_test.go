package deadline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/deadline"
)

// TestUpdateKeepsTheTimeoutOfCallsInFlight checks that a call keeps the
// timeout it started with, and that calls started after an update get the
// new one, in their errors and in OnTimeout.
func TestUpdateKeepsTheTimeoutOfCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var told []time.Duration
		d, err := deadline.New(deadline.Config{Name: "chat", Timeout: 10 * time.Second,
			OnTimeout: func(_ context.Context, d time.Duration) { mu.Lock(); told = append(told, d); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		start := time.Now()
		before := make(chan error, 1)
		go func() { before <- d.Execute(context.Background(), hang) }()
		synctest.Wait()
		if err := d.Update(deadline.Config{Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		var ee *deadline.ExceededError
		err = d.Execute(context.Background(), hang)
		if !errors.As(err, &ee) || ee.Duration != time.Second || ee.Name != "chat" || time.Since(start) != time.Second {
			t.Errorf("a call started after the update: %v after %v; want a 1s timeout of chat", err, time.Since(start))
		}
		err = <-before
		if !errors.As(err, &ee) || ee.Duration != 10*time.Second || time.Since(start) != 10*time.Second {
			t.Errorf("a call started before the update: %v after %v; want its 10s timeout", err, time.Since(start))
		}
		if len(told) != 2 || told[0] != time.Second || told[1] != 10*time.Second {
			t.Errorf("OnTimeout told %v; want [1s 10s]", told)
		}
		if d.Timeout() != time.Second || d.Config().Timeout != time.Second || d.Config().OnTimeout == nil {
			t.Errorf("Timeout %v, Config %+v; want 1s, the hook kept", d.Timeout(), d.Config())
		}
	})
}

// TestUpdateInvalidTimeout checks that an invalid Update returns New's
// error and changes nothing, and that the zero Deadline refuses updates.
func TestUpdateInvalidTimeout(t *testing.T) {
	d, err := deadline.New(deadline.Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		_, want := deadline.New(deadline.Config{Timeout: bad})
		if err := d.Update(deadline.Config{Timeout: bad}); err == nil || err.Error() != want.Error() {
			t.Errorf("Update(%v) = %v; want %v", bad, err, want)
		}
	}
	if d.Timeout() != time.Second {
		t.Errorf("Timeout %v after invalid updates; want 1s", d.Timeout())
	}
	var zero deadline.Deadline
	if err := zero.Update(deadline.Config{Timeout: time.Second}); err == nil || zero.Timeout() != 0 {
		t.Errorf("zero Deadline: Update = %v, Timeout %v; want an error and no timeout", err, zero.Timeout())
	}
}

// TestUpdateConcurrentTimeouts runs calls while another goroutine updates
// the timeout: every timeout error names a timeout that was in force.
func TestUpdateConcurrentTimeouts(t *testing.T) {
	d, err := deadline.New(deadline.Config{Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	valid := map[time.Duration]bool{time.Millisecond: true, 2 * time.Millisecond: true}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var ee *deadline.ExceededError
				err := d.Execute(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
				if !errors.As(err, &ee) || !valid[ee.Duration] {
					t.Errorf("err %v; want a timeout of 1ms or 2ms", err)
					return
				}
			}
		})
	}
	for range 500 {
		next := time.Duration(rand.IntN(3)) * time.Millisecond // 0 is invalid
		err := d.Update(deadline.Config{Timeout: next})
		if (err == nil) != (next > 0) {
			t.Errorf("Update(%v) = %v", next, err)
		}
	}
	close(stop)
	wg.Wait()
}
