package breaker

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight/policy"
)

var (
	errBoom   = errors.New("boom")
	errBenign = errors.New("benign")
)

// newBreaker builds a Breaker from cfg, failing the test on error, and
// closes it at the end of the test.
func newBreaker(t *testing.T, cfg Config) *Breaker {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// call runs one call through b whose fn returns err, and returns Execute's
// result and whether fn ran.
func call(b *Breaker, err error) (error, bool) {
	ran := false
	got := b.Execute(context.Background(), func(context.Context) error {
		ran = true
		return err
	})
	return got, ran
}

// report admits one call with Enter and reports err with Exit; it returns
// Enter's error if the call was rejected.
func report(b *Breaker, err error) error {
	ctx, tok, rerr := b.Enter(context.Background())
	if rerr != nil {
		return rerr
	}
	return b.Exit(ctx, tok, err)
}

// trip opens b with failures, failing the test if it takes more than max.
func trip(t *testing.T, b *Breaker, max int) {
	t.Helper()
	for range max {
		if b.State() == Open {
			return
		}
		call(b, errBoom)
	}
	if s := b.State(); s != Open {
		t.Fatalf("not open after %d failures: %v", max, s)
	}
}

// wantRejected checks that err is a breaker rejection with reason.
func wantRejected(t *testing.T, err error, name, reason string) {
	t.Helper()
	if !errors.Is(err, ErrOpen) || !errors.Is(err, policy.ErrRejected) {
		t.Fatalf("err = %v, want a rejection matching ErrOpen and ErrRejected", err)
	}
	var rej *policy.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("err = %T, want *policy.RejectedError", err)
	}
	if rej.Kind != "breaker" || rej.Name != name || rej.Reason != reason {
		t.Fatalf("rejection = %+v, want {breaker %q %q}", *rej, name, reason)
	}
}

// hookLog records OnStateChange calls.
type hookLog struct {
	mu  sync.Mutex
	got []string
}

func (h *hookLog) hook(from, to State) {
	h.mu.Lock()
	h.got = append(h.got, from.String()+"->"+to.String())
	h.mu.Unlock()
}

func (h *hookLog) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// points returns the int64 data points of metric name as "attrs" -> value,
// attrs encoded as k=v,k=v; nil if the metric is absent.
func points(t *testing.T, r *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			out := map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
			return out
		}
	}
	return nil
}

// attrs encodes key=value pairs as points does.
func attrs(kv ...string) string {
	var parts []string
	for i := 0; i < len(kv); i += 2 {
		parts = append(parts, kv[i]+"="+kv[i+1])
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
