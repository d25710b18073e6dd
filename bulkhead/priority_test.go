package bulkhead

import (
	"context"
	"errors"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/policy"
)

func withPriority(p policy.Priority) context.Context {
	return policy.WithPriority(context.Background(), p)
}

func TestReserveValidation(t *testing.T) {
	tests := []struct {
		name    string
		reserve map[policy.Priority]int
		want    string
	}{
		{"sheddable", map[policy.Priority]int{policy.PrioritySheddable: 1}, "bulkhead: Config.Reserve[sheddable] must not be set: only the default and critical"},
		{"unknown", map[policy.Priority]int{7: 1}, "bulkhead: Config.Reserve[Priority(7)] must not be set: only the default and critical"},
		{"negative", map[policy.Priority]int{policy.PriorityCritical: -1}, "bulkhead: Config.Reserve[critical] must be >= 0"},
		{"every slot", map[policy.Priority]int{policy.PriorityCritical: 3, policy.PriorityDefault: 1}, "bulkhead: Config.Reserve[critical] = 3 leaves no slot of 4 open to every call (1 reserved by the others)"},
		{"overflow", map[policy.Priority]int{policy.PriorityCritical: math.MaxInt, policy.PriorityDefault: math.MaxInt}, "bulkhead: Config.Reserve[default] = 9223372036854775807 leaves no slot"},
	}
	for _, tt := range tests {
		b, err := New(Config{Limit: 4, Reserve: tt.reserve})
		if b != nil || err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, %v; want an error starting %q", tt.name, b, err, tt.want)
		}
	}
	b := mustNew(t, Config{Limit: 4, Reserve: map[policy.Priority]int{policy.PriorityCritical: 3, policy.PriorityDefault: 0}})
	b.Close()
}

// The seed's storm at a shared limit: long sheddable calls fill every slot
// they may take, and critical calls still run at once in the reserve.
func TestReserveAdmitsCriticalPastSheddableStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Name: "server", Limit: 5, MaxQueue: 2, Reserve: map[policy.Priority]int{policy.PriorityCritical: 2}})
		k := newBlocker(b)
		for _, name := range []string{"chat1", "chat2", "chat3", "chat4", "chat5"} {
			k.start(withPriority(policy.PrioritySheddable), name)
		}
		checkCounts(t, b, 3, 2)
		// A sixth chat finds the queue full of its own priority.
		err := b.Execute(withPriority(policy.PrioritySheddable), func(context.Context) error { return nil })
		checkRejection(t, err, "server", ReasonFull)
		k.start(withPriority(policy.PriorityCritical), "login1")
		k.start(withPriority(policy.PriorityCritical), "login2")
		if got, want := k.order(), "chat1,chat2,chat3,login1,login2"; got != want {
			t.Fatalf("ran %s; want %s", got, want)
		}
		// A third login waits, ahead of the chats, and takes the place of
		// the newest one.
		k.start(withPriority(policy.PriorityCritical), "login3")
		checkRejection(t, <-k.errs, "server", ReasonShed)
		k.release("login1")
		if got, want := k.order(), "chat1,chat2,chat3,login1,login2,login3"; got != want {
			t.Fatalf("ran %s; want %s", got, want)
		}
		for _, name := range []string{"login2", "login3", "chat1", "chat2", "chat3", "chat4"} {
			k.release(name)
		}
		checkCounts(t, b, 0, 0)
	})
}

func TestShedIsCountedAndPassedToOnReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		b := mustNew(t, Config{Name: "x", Limit: 1, MaxQueue: 1, OnReject: func(_ context.Context, err *policy.RejectedError) {
			seen = append(seen, err.Reason)
		}})
		k := newBlocker(b)
		k.start(context.Background(), "h")
		k.start(withPriority(policy.PrioritySheddable), "s")
		k.start(withPriority(policy.PriorityCritical), "c")
		err := <-k.errs
		if !errors.Is(err, ErrFull) || strings.Join(seen, ",") != ReasonShed {
			t.Fatalf("shed waiter: %v, OnReject saw %v; want ErrFull, [shed]", err, seen)
		}
		k.release("h")
		k.release("c")
		checkCounts(t, b, 0, 0)
	})
}

func TestRejectionsCountedByPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		defer mp.Shutdown(context.Background())
		b := mustNew(t, Config{Name: "x", Limit: 1, MaxQueue: 1, MeterProvider: mp})
		k := newBlocker(b)
		k.start(context.Background(), "h")
		k.start(withPriority(policy.PrioritySheddable), "s")
		k.start(withPriority(policy.PriorityCritical), "c") // sheds s
		<-k.errs
		b.Execute(context.Background(), func(context.Context) error { return nil }) // full
		k.release("h")
		k.release("c")
		got := map[string]int64{}
		for _, dp := range collect(t, r)["watertight.rejections"].Data.(metricdata.Sum[int64]).DataPoints {
			reason, _ := dp.Attributes.Value("watertight.rejection.reason")
			prio, _ := dp.Attributes.Value("watertight.priority")
			got[reason.AsString()+"/"+prio.AsString()] += dp.Value
		}
		if want := map[string]int64{"shed/sheddable": 1, "full/": 1}; !maps.Equal(got, want) {
			t.Errorf("rejections by reason/priority %v; want %v", got, want)
		}
	})
}

// A Config with several bad reserves names the same one every time.
func TestReserveErrorIsTheSameEveryTime(t *testing.T) {
	cfg := Config{Limit: 4, Reserve: map[policy.Priority]int{7: 1, policy.PriorityCritical: -1, policy.PrioritySheddable: 1, -5: 2}}
	_, first := New(cfg)
	for range 100 {
		if _, err := New(cfg); err == nil || err.Error() != first.Error() {
			t.Fatalf("New = %v, then %v", first, err)
		}
	}
}

// There is no ageing: under a steady load of default calls, a sheddable
// waiter with no MaxWait and no deadline waits as long as the load lasts
// (here 10 minutes), and runs once it stops.
func TestSheddableWaitsAsLongAsHigherPrioritiesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Limit: 1, MaxQueue: 3})
		stop := make(chan struct{})
		var loaders sync.WaitGroup
		for range 2 {
			loaders.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					b.Execute(context.Background(), func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil })
				}
			})
		}
		time.Sleep(time.Millisecond)
		start := time.Now()
		ran := make(chan time.Duration, 1)
		go b.Execute(withPriority(policy.PrioritySheddable), func(context.Context) error { ran <- time.Since(start); return nil })
		time.Sleep(10 * time.Minute)
		select {
		case d := <-ran:
			t.Fatalf("the sheddable call ran after %v under a steady default load", d)
		default:
		}
		close(stop)
		loaders.Wait()
		if d := <-ran; d < 10*time.Minute {
			t.Fatalf("ran after %v; want once the load stopped", d)
		}
	})
}
