package redisstate_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/redisstate"
)

// exits are the ways fn leaves other than returning: a panic (which goes
// on up to the caller) and runtime.Goexit.
var exits = []struct {
	name string
	run  func(p policy.Policy) bool // reports whether a panic reached the caller
}{
	{"panic", func(p policy.Policy) (reached bool) {
		defer func() { reached = recover() == "in fn" }()
		p.Execute(context.Background(), func(context.Context) error { panic("in fn") })
		return false
	}},
	{"Goexit", func(p policy.Policy) bool {
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Execute(context.Background(), func(context.Context) error { runtime.Goexit(); return nil })
		}()
		<-done
		return true
	}},
}

// TestBudgetExitFreesLease: fn's panic or Goexit gives back the lease and
// the Local slot, and a panic goes on up to the caller.
func TestBudgetExitFreesLease(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	for _, x := range exits {
		t.Run(x.name, func(t *testing.T) {
			local, err := bulkhead.New(bulkhead.Config{Name: "local", Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer local.Close()
			b := newBudget(t, redisstate.BudgetConfig{Name: "exit-" + x.name, Limit: 1, Local: local, Redis: patientRedis(c)})
			for range 3 {
				if !x.run(b) {
					t.Fatal("the panic did not reach the caller")
				}
				if n := zcard(t, c, leasesKey("exit-"+x.name)); n != 0 || local.Active() != 0 || b.InFlight() != 0 {
					t.Fatalf("left: %d leases, %d local, %d in flight", n, local.Active(), b.InFlight())
				}
			}
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("after %s: %v", x.name, err)
			}
		})
	}
}

// TestSharedExitCountsFailure: fn's panic or Goexit counts as a failure of
// the local breaker, with the default classification and with an
// IsFailure that counts no error, and a panic goes on up to the caller.
func TestSharedExitCountsFailure(t *testing.T) {
	s := startRedis(t)
	for _, x := range exits {
		for _, cls := range []struct {
			name      string
			isFailure func(error) bool
		}{
			{"default", nil},
			{"no error fails", func(error) bool { return false }},
		} {
			t.Run(x.name+"/"+cls.name, func(t *testing.T) {
				sb := newShared(t, redisstate.BreakerConfig{
					Breaker: breaker.Config{Name: "exit", ConsecutiveFailures: 2, IsFailure: cls.isFailure},
					Redis:   patientRedis(newClient(t, s.Addr())), NoSubscribe: true,
				})
				if !x.run(sb) {
					t.Fatal("the panic did not reach the caller")
				}
				if c := sb.Breaker().Counts(); c.TotalFailures != 1 || c.ConsecutiveFailures != 1 {
					t.Fatalf("after one %s: %+v", x.name, c)
				}
				x.run(sb)
				if st := sb.State(); st != breaker.Open {
					t.Fatalf("after two: %v", st)
				}
			})
		}
	}
}

// TestSharedRejectionAllocatesNothing: a call the local breaker rejects
// allocates nothing.
func TestSharedRejectionAllocatesNothing(t *testing.T) {
	s := startRedis(t)
	sb := newShared(t, redisstate.BreakerConfig{
		Breaker: breaker.Config{Name: "allocs", ConsecutiveFailures: 1, MeterProvider: noop.NewMeterProvider()},
		Redis:   patientRedis(newClient(t, s.Addr())), NoSubscribe: true,
	})
	ctx := context.Background()
	fn := func(context.Context) error { return errBoom }
	sb.Execute(ctx, fn)
	if err := sb.Execute(ctx, fn); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after a trip: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { sb.Execute(ctx, fn) }); n != 0 {
		t.Errorf("rejection: %v allocs", n)
	}
}
