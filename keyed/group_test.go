package keyed_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// bulkheads returns a New that builds a bulkhead of limit slots and no
// queue per key, and counts the policies built and closed.
func bulkheads(limit int, built, closed *atomic.Int64) func(key, label string) (policy.Policy, error) {
	return func(key, label string) (policy.Policy, error) {
		built.Add(1)
		b, err := bulkhead.New(bulkhead.Config{Name: label, Limit: limit})
		if err != nil {
			return nil, err
		}
		return &closeCounted{Bulkhead: b, closed: closed}, nil
	}
}

type closeCounted struct {
	*bulkhead.Bulkhead
	closed *atomic.Int64
}

func (c *closeCounted) Close() error { c.closed.Add(1); return c.Bulkhead.Close() }

func newGroup(t testing.TB, cfg keyed.Config) *keyed.Group {
	t.Helper()
	g, err := keyed.NewGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func key(k string) context.Context { return policy.WithKey(context.Background(), k) }

func reason(err error) string {
	var re *policy.RejectedError
	if errors.As(err, &re) {
		return re.Kind + "/" + re.Reason
	}
	return ""
}

// TestIsolation: a key whose policy is full does not hold up another key.
func TestIsolation(t *testing.T) {
	var built, closed atomic.Int64
	g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 10})
	release := make(chan struct{})
	inA := make(chan struct{})
	go g.Execute(key("a"), func(context.Context) error { close(inA); <-release; return nil })
	<-inA
	if err := g.Execute(key("a"), nop); reason(err) != "bulkhead/full" {
		t.Errorf("a second call of key a = %v, want a's bulkhead full", err)
	}
	if err := g.Execute(key("b"), nop); err != nil {
		t.Errorf("key b while a is full = %v", err)
	}
	close(release)
	if built.Load() != 2 || g.Keys() != 2 {
		t.Errorf("%d policies built, %d keys live; want 2, 2", built.Load(), g.Keys())
	}
}

func nop(context.Context) error { return nil }

// TestNoPolicy: calls without a key, or with one too long, or a new key
// when every live key is held, get no policy: Rest runs them, or they are
// rejected with their reason.
func TestNoPolicy(t *testing.T) {
	var built, closed atomic.Int64
	var rest atomic.Int64
	for _, withRest := range []bool{false, true} {
		cfg := keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 1}
		if withRest {
			cfg.Rest = restRunner{&rest}
		}
		g := newGroup(t, cfg)
		release := make(chan struct{})
		held := make(chan struct{})
		go g.Execute(key("a"), func(context.Context) error { close(held); <-release; return nil })
		<-held
		for _, c := range []struct {
			ctx  context.Context
			want string
		}{
			{context.Background(), "keyed/no_key"},
			{key(""), "keyed/no_key"},
			{key(strings.Repeat("k", 1<<20)), "keyed/key_too_long"},
			{key(strings.Repeat("k", keyed.DefaultMaxKeyLen+1)), "keyed/key_too_long"},
			{key("b"), "keyed/keys_full"},
		} {
			err := g.Execute(c.ctx, nop)
			switch {
			case withRest && err != nil:
				t.Errorf("with Rest, %s call = %v, want run by Rest", c.want, err)
			case !withRest && (reason(err) != c.want || !errors.Is(err, keyed.ErrNoPolicy) || !errors.Is(err, policy.ErrRejected)):
				t.Errorf("without Rest, call = %v, want %s matching ErrNoPolicy", err, c.want)
			}
		}
		if withRest && rest.Load() != 5 {
			t.Errorf("Rest ran %d calls, want 5", rest.Load())
		}
		close(release)
	}
	// A key of DefaultMaxKeyLen bytes gets its policy.
	g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 1})
	if err := g.Execute(key(strings.Repeat("k", keyed.DefaultMaxKeyLen)), nop); err != nil {
		t.Errorf("a key of MaxKeyLen bytes = %v", err)
	}
}

type restRunner struct{ n *atomic.Int64 }

func (r restRunner) Execute(ctx context.Context, fn policy.Func) error { r.n.Add(1); return fn(ctx) }

// TestNeverEvictedWhileHeld: a flood of new keys evicts idle keys, never
// one a call holds.
func TestNeverEvictedWhileHeld(t *testing.T) {
	var built, closed atomic.Int64
	var mu sync.Mutex
	policies := map[string][]policy.Policy{}
	g := newGroup(t, keyed.Config{MaxKeys: 2, New: func(k, l string) (policy.Policy, error) {
		p, err := bulkheads(1, &built, &closed)(k, l)
		mu.Lock()
		policies[k] = append(policies[k], p)
		mu.Unlock()
		return p, err
	}})
	release := make(chan struct{})
	held := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- g.Execute(key("held"), func(context.Context) error { close(held); <-release; return nil })
	}()
	<-held
	for i := range 100 {
		if err := g.Execute(key(fmt.Sprint("flood", i)), nop); err != nil {
			t.Fatalf("flood key %d = %v", i, err)
		}
	}
	if err := g.Execute(key("held"), nop); reason(err) != "bulkhead/full" {
		t.Errorf("the held key's second call = %v, want its own bulkhead, still full", err)
	}
	close(release)
	<-done
	if n := len(policies["held"]); n != 1 {
		t.Errorf("the held key's policy was built %d times, want once", n)
	}
	if built.Load()-closed.Load() != int64(g.Keys()) || g.Keys() != 2 {
		t.Errorf("%d built, %d closed, %d live; every evicted policy closed, 2 live", built.Load(), closed.Load(), g.Keys())
	}
}

// TestMinIdle: a key used within MinIdle is not evicted for a new one; once
// idle for MinIdle it is, and its policy is closed.
func TestMinIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var built, closed atomic.Int64
		g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 1, MinIdle: time.Minute})
		g.Execute(key("a"), nop)
		time.Sleep(59 * time.Second)
		if err := g.Execute(key("b"), nop); reason(err) != "keyed/keys_full" {
			t.Fatalf("a new key while a was used within MinIdle = %v, want keys_full", err)
		}
		if built.Load() != 1 {
			t.Errorf("%d policies built: a refused key must cost no policy", built.Load())
		}
		time.Sleep(time.Second)
		if err := g.Execute(key("b"), nop); err != nil {
			t.Fatalf("a new key once a was idle for MinIdle = %v", err)
		}
		if closed.Load() != 1 || g.Keys() != 1 {
			t.Errorf("%d closed, %d live; want a's policy closed, 1 live", closed.Load(), g.Keys())
		}
	})
}

// TestLabels: New gets the key as its label only if Labels allows it.
func TestLabels(t *testing.T) {
	got := map[string]string{}
	g := newGroup(t, keyed.Config{MaxKeys: 10, Labels: []string{"acme"}, New: func(k, l string) (policy.Policy, error) {
		got[k] = l
		return bulkhead.New(bulkhead.Config{Limit: 1})
	}})
	g.Execute(key("acme"), nop)
	g.Execute(key("attacker-123"), nop)
	if got["acme"] != "acme" || got["attacker-123"] != keyed.LabelOther {
		t.Errorf("labels %v, want acme for acme and %q for the other", got, keyed.LabelOther)
	}
}

// TestNewFails: New's error comes back wrapped, and the next call asks
// again; a nil policy is an error too.
func TestNewFails(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	g := newGroup(t, keyed.Config{MaxKeys: 10, Name: "g", New: func(k, l string) (policy.Policy, error) {
		if calls.Add(1) == 3 {
			return nil, nil
		}
		return nil, boom
	}})
	for range 2 {
		if err := g.Execute(key("a"), nop); !errors.Is(err, boom) || !strings.Contains(err.Error(), "keyed: g: building the policy of a key") {
			t.Errorf("Execute = %v, want New's error, wrapped", err)
		}
	}
	if err := g.Execute(key("a"), nop); err == nil || !strings.Contains(err.Error(), "nil policy") {
		t.Errorf("Execute with a nil policy = %v", err)
	}
	unnamed := newGroup(t, keyed.Config{MaxKeys: 10, New: func(k, l string) (policy.Policy, error) { return nil, boom }})
	if err := unnamed.Execute(key("a"), nop); err == nil || !strings.HasPrefix(err.Error(), "keyed: building the policy of a key") {
		t.Errorf("Execute in a Group without a name = %v", err)
	}
	if g.Keys() != 0 {
		t.Errorf("%d keys live after New failed", g.Keys())
	}
}

// TestConfigRefused: NewGroup names the invalid field.
func TestConfigRefused(t *testing.T) {
	ok := func(string, string) (policy.Policy, error) { return nil, nil }
	for _, c := range []struct {
		cfg  keyed.Config
		want string
	}{
		{keyed.Config{MaxKeys: 1}, "keyed: Config.New must not be nil"},
		{keyed.Config{New: ok}, "keyed: Config.MaxKeys must be >= 1, got 0"},
		{keyed.Config{New: ok, MaxKeys: -1}, "keyed: Config.MaxKeys must be >= 1, got -1"},
		{keyed.Config{New: ok, MaxKeys: 1, MinIdle: -1}, "keyed: Config.MinIdle must be >= 0, got -1ns"},
		{keyed.Config{New: ok, MaxKeys: 1, MaxKeyLen: -1}, "keyed: Config.MaxKeyLen must be >= 0, got -1"},
		{keyed.Config{New: ok, MaxKeys: 1, Rest: (*bulkhead.Bulkhead)(nil)}, "keyed: Config.Rest is a nil *bulkhead.Bulkhead"},
	} {
		if _, err := keyed.NewGroup(c.cfg); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("NewGroup = %v, want %q", err, c.want)
		}
	}
}

// TestKeyFunc: Config.Key replaces policy.KeyOf.
func TestKeyFunc(t *testing.T) {
	var built, closed atomic.Int64
	g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 10,
		Key: func(ctx context.Context) string { return "always" }})
	g.Execute(context.Background(), nop)
	g.Execute(key("other"), nop)
	if built.Load() != 1 {
		t.Errorf("%d policies built, want 1: every call has the key Key gives", built.Load())
	}
}

// TestPanicReleases: a panic in fn releases the key (and its policy's
// slot).
func TestPanicReleases(t *testing.T) {
	var built, closed atomic.Int64
	g := newGroup(t, keyed.Config{New: bulkheads(1, &built, &closed), MaxKeys: 1})
	func() {
		defer func() { recover() }()
		g.Execute(key("a"), func(context.Context) error { panic("x") })
	}()
	if err := g.Execute(key("b"), nop); err != nil {
		t.Errorf("after a panic, a new key = %v: key a still held", err)
	}
}
