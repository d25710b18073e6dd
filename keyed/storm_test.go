package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// TestStorm: 100 000 calls from 64 goroutines over 1 000 keys (half of
// the calls on 10 of them), 32 live at most (so keys are evicted and
// built again, and a new key finds every live one held), each key a
// bulkhead of 2 slots and a queue of 2, with callers that cancel and fns
// that panic. Every call ends once, in one outcome; no built bulkhead
// holds a slot afterwards; the rejections counted equal those the callers
// saw, by kind and reason. Under -short, 20 000 calls.
func TestStorm(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var mu sync.Mutex
	var all []*bulkhead.Bulkhead
	g := newGroup(t, keyed.Config{Name: "storm", MaxKeys: 32, MeterProvider: mp,
		New: func(k, label string) (policy.Policy, error) {
			b, err := bulkhead.New(bulkhead.Config{Name: label, Limit: 2, MaxQueue: 2, MaxWait: time.Millisecond, MeterProvider: mp})
			mu.Lock()
			all = append(all, b)
			mu.Unlock()
			return b, err
		}})
	n, workers := 100_000, 64
	if testing.Short() {
		n = 20_000
	}
	var ok, canceled, panicked atomic.Int64
	seen := map[string]*atomic.Int64{}
	for _, r := range []string{"bulkhead/full", "bulkhead/wait_timeout", "keyed/keys_full"} {
		seen[r] = new(atomic.Int64)
	}
	var other atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				stormCall(g, i, &ok, &canceled, &panicked, seen, &other)
			}
		})
	}
	wg.Wait()
	var sum int64
	for _, c := range seen {
		sum += c.Load()
	}
	t.Logf("%d ok, %d canceled, %d panicked, %d full, %d wait_timeout, %d keys_full, %d other; %d bulkheads built",
		ok.Load(), canceled.Load(), panicked.Load(), seen["bulkhead/full"].Load(), seen["bulkhead/wait_timeout"].Load(),
		seen["keyed/keys_full"].Load(), other.Load(), len(all))
	if total := ok.Load() + canceled.Load() + panicked.Load() + sum + other.Load(); total != int64(n) || other.Load() != 0 {
		t.Errorf("%d outcomes (%d other) for %d calls", total, other.Load(), n)
	}
	for i, b := range all {
		if b.Active() != 0 || b.Queued() != 0 {
			t.Fatalf("bulkhead %d holds %d slots, %d waiters after the storm", i, b.Active(), b.Queued())
		}
	}
	counted := rejections(t, reader)
	for r, c := range seen {
		if counted[r] != c.Load() {
			t.Errorf("%s: %d counted, %d seen by callers", r, counted[r], c.Load())
		}
	}
}

func stormCall(g *keyed.Group, i int, ok, canceled, panicked *atomic.Int64, seen map[string]*atomic.Int64, other *atomic.Int64) {
	k := rand.IntN(1000)
	if i%2 == 0 {
		k %= 10
	}
	ctx, cancel := context.WithCancel(key(fmt.Sprint("k", k)))
	defer cancel()
	if i%7 == 0 {
		go cancel()
	}
	defer func() {
		if recover() != nil {
			panicked.Add(1)
		}
	}()
	err := g.Execute(ctx, func(ctx context.Context) error {
		if i%13 == 0 {
			panic("storm")
		}
		time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
		return nil
	})
	switch {
	case err == nil:
		ok.Add(1)
	case errors.Is(err, context.Canceled):
		canceled.Add(1)
	case seen[reason(err)] != nil:
		seen[reason(err)].Add(1)
	default:
		other.Add(1)
	}
}

// rejections returns the watertight.rejections counted by reader, by
// "kind/reason".
func rejections(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "watertight.rejections" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				k, _ := dp.Attributes.Value(attribute.Key("watertight.policy.kind"))
				r, _ := dp.Attributes.Value(attribute.Key("watertight.rejection.reason"))
				out[k.AsString()+"/"+r.AsString()] += dp.Value
			}
		}
	}
	return out
}

// TestLabelsBoundTelemetry: 10 000 keys, two of them allowed as labels,
// each key a bulkhead named by its label that rejects: the rejections
// counted carry three policy names at most. Under -short, 2 000 keys.
func TestLabelsBoundTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	g := newGroup(t, keyed.Config{MaxKeys: 100, Labels: []string{"k1", "k2"},
		New: func(k, label string) (policy.Policy, error) {
			return bulkhead.New(bulkhead.Config{Name: label, Limit: 1, MeterProvider: mp})
		}})
	block := make(chan struct{})
	var holders sync.WaitGroup
	keys := 10_000
	if testing.Short() {
		keys = 2_000
	}
	for i := range keys {
		k := key(fmt.Sprint("k", i))
		held := make(chan struct{})
		holders.Go(func() {
			g.Execute(k, func(context.Context) error { close(held); <-block; return nil })
		})
		<-held
		g.Execute(k, nop) // rejected: its bulkhead is full
		if i%100 == 99 {  // free all 100 keys before the next 100 need room
			close(block)
			holders.Wait()
			block = make(chan struct{})
		}
	}
	close(block)
	names := map[string]int64{}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "watertight.rejections" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				n, _ := dp.Attributes.Value(attribute.Key("watertight.policy.name"))
				names[n.AsString()] += dp.Value
			}
		}
	}
	if len(names) > 3 || names["k1"] != 1 || names["k2"] != 1 || names[keyed.LabelOther] != int64(keys-2) {
		t.Errorf("rejections by policy name %v, want k1: 1, k2: 1, other: %d", names, keys-2)
	}
}
