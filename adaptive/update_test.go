package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
)

// TestUpdateKeepsTheLearnedLimit checks that an update keeps the learned
// limit and the no-load latency, clamped to the new bounds, and that
// InitialLimit does not restart it.
func TestUpdateKeepsTheLearnedLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{InitialLimit: 20, MaxQueue: 1})
		for i := 0; l.State().Probing && i < 1000; i++ {
			time.Sleep(time.Millisecond)
			l.Observe(10*time.Millisecond, false)
		}
		st := l.State()
		if st.Probing || !st.Measured {
			t.Fatalf("the first probe did not end: %+v", st)
		}
		learned := l.Limit()
		if err := l.Update(adaptive.Config{InitialLimit: 5, MaxQueue: 2}); err != nil {
			t.Fatal(err)
		}
		if l.Limit() != learned || l.State().NoLoad != st.NoLoad {
			t.Errorf("after an update with InitialLimit 5: Limit %d, no-load %v; want %d and %v kept", l.Limit(), l.State().NoLoad, learned, st.NoLoad)
		}
		if err := l.Update(adaptive.Config{MaxLimit: learned - 1}); err != nil {
			t.Fatal(err)
		}
		if l.Limit() != learned-1 || l.Admission() != learned-1 || l.MaxLimit() != learned-1 {
			t.Errorf("MaxLimit %d: Limit %d, admission %d, MaxLimit() %d; want all %d", learned-1, l.Limit(), l.Admission(), l.MaxLimit(), learned-1)
		}
		if err := l.Update(adaptive.Config{MinLimit: learned + 5, MaxLimit: learned + 10}); err != nil {
			t.Fatal(err)
		}
		if l.Limit() != learned+5 {
			t.Errorf("MinLimit %d: Limit %d; want the limit raised to it", learned+5, l.Limit())
		}
	})
}

// TestUpdateInvalidChangesNothing checks that an invalid update returns
// New's error and leaves the Config in force.
func TestUpdateInvalidChangesNothing(t *testing.T) {
	in := adaptive.Config{Name: "chat", MaxLimit: 50, MaxQueue: 3, MaxWait: time.Second}
	l := mustNew(t, in)
	for _, bad := range []adaptive.Config{
		{MinLimit: 10, MaxLimit: 5},
		{MaxQueue: -2},
		{Tolerance: 0.5},
		{ProbeInterval: -1},
		{InitialLimit: 500},
	} {
		_, want := adaptive.New(bad)
		if err := l.Update(bad); err == nil || err.Error() != want.Error() {
			t.Errorf("Update(%+v) = %v; want New's error %v", bad, err, want)
		}
	}
	if got := l.Config(); !reflect.DeepEqual(got, in) || l.MaxLimit() != 50 {
		t.Errorf("Config %+v, MaxLimit %d after invalid updates; want %+v", got, l.MaxLimit(), in)
	}
	if err := l.Update(adaptive.Config{Name: "other", MaxLimit: 60}); err != nil {
		t.Fatal(err)
	}
	if got := l.Config(); got.Name != "chat" || got.MaxLimit != 60 || got.MaxQueue != 0 {
		t.Errorf("Config %+v; want Name chat kept, MaxLimit 60, MaxQueue 0", got)
	}
}

// TestUpdateConcurrent runs calls while another goroutine updates the
// limiter with random valid and invalid configs: no slot is lost, and
// Config is always the last valid one.
func TestUpdateConcurrent(t *testing.T) {
	l := mustNew(t, adaptive.Config{MaxLimit: 8, MaxQueue: 4})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				err := l.Execute(ctx, func(context.Context) error { return nil })
				cancel()
				if err != nil && !errors.Is(err, adaptive.ErrFull) && !errors.Is(err, context.DeadlineExceeded) {
					t.Error(err)
					return
				}
			}
		})
	}
	last := l.Config()
	for range 2000 {
		lo := rand.IntN(4)
		cfg := adaptive.Config{MinLimit: lo, MaxLimit: lo + rand.IntN(8) - 1, MaxQueue: rand.IntN(6) - 2}
		if err := l.Update(cfg); err == nil {
			last = cfg
		}
		if got := l.Config(); !reflect.DeepEqual(got, last) {
			t.Fatalf("Config %+v; want the last valid update %+v", got, last)
		}
	}
	if err := l.Update(adaptive.Config{MaxLimit: 8, MaxQueue: 4}); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if l.Active() != 0 || l.Queued() != 0 {
		t.Errorf("after the storm: Active %d, Queued %d; want 0 and 0", l.Active(), l.Queued())
	}
}
