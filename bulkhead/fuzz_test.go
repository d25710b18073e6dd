package bulkhead_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/bulkhead"
)

// FuzzConfig builds a Config from fuzzed fields and checks that New never
// panics and either returns a Bulkhead that runs a call, or an error that
// starts with "bulkhead: Config." and names the first field the documented
// rules make invalid, exactly when one is invalid.
func FuzzConfig(f *testing.F) {
	for _, s := range []struct {
		limit, queue int
		wait         int64
	}{
		{1, 0, 0}, {0, 0, 0}, {-1, 0, 0}, {math.MaxInt, bulkhead.Unbounded, math.MaxInt64},
		{math.MinInt, math.MinInt, math.MinInt64}, {3, -2, 0}, {3, 10, -1}, {1, math.MaxInt, 1},
	} {
		f.Add("fuzz", s.limit, s.queue, s.wait)
	}
	f.Fuzz(func(t *testing.T, name string, limit, maxQueue int, maxWait int64) {
		cfg := bulkhead.Config{Name: name, Limit: limit, MaxQueue: maxQueue, MaxWait: time.Duration(maxWait)}
		var wantField string
		switch {
		case limit < 1:
			wantField = "Limit"
		case maxQueue < 0 && maxQueue != bulkhead.Unbounded:
			wantField = "MaxQueue"
		case maxWait < 0:
			wantField = "MaxWait"
		}
		b, err := bulkhead.New(cfg)
		if err != nil {
			if b != nil {
				t.Fatalf("New returned both %v and an error", b)
			}
			checkConfigError(t, err, "bulkhead", wantField)
			return
		}
		if wantField != "" {
			t.Fatalf("New(%+v) accepted an invalid %s", cfg, wantField)
		}
		defer b.Close()
		ran := 0
		if err := b.Execute(context.Background(), func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
			t.Fatalf("Execute = %v, fn ran %d times", err, ran)
		}
		if b.Active() != 0 || b.Queued() != 0 || b.Limit() != limit {
			t.Fatalf("after a call: Active %d, Queued %d, Limit %d", b.Active(), b.Queued(), b.Limit())
		}
	})
}

// checkConfigError checks that err says "<pkg>: Config.<field>".
func checkConfigError(t *testing.T, err error, pkg, field string) {
	t.Helper()
	prefix := pkg + ": Config." + field
	if field == "" || !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("error %q; want one starting with %q", err, prefix)
	}
	if next := err.Error()[len(prefix):]; next != "" && !strings.HasPrefix(next, " ") {
		t.Fatalf("error %q names another field than %s", err, field)
	}
}
