package keyed_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// panicClose is a policy whose Close panics, as a user's policy closed
// twice may (a channel closed again).
type panicClose struct{ panics bool }

func (panicClose) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

func (p panicClose) Close() error {
	if p.panics {
		panic("closed twice")
	}
	return nil
}

// TestEvictedClosePanicHoldsNothing: when the evicted policy's Close
// panics while a new key is being added, the panic reaches the caller,
// but no call holds the new key: it must stay evictable, else every such
// panic takes one of MaxKeys for good and the Group ends up refusing every
// new key with keys_full while no call runs.
func TestEvictedClosePanicHoldsNothing(t *testing.T) {
	g := newGroup(t, keyed.Config{MaxKeys: 1, New: func(k, _ string) (policy.Policy, error) {
		return panicClose{panics: k == "a"}, nil
	}})
	if err := g.Execute(key("a"), nop); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		g.Execute(key("b"), nop) // evicts a, whose Close panics
	}()
	if err := g.Execute(key("c"), nop); err != nil && reason(err) == "keyed/keys_full" {
		t.Errorf("a new key while no call runs = %v: the key added as a's Close panicked is held for good", err)
	}
}

// TestDuplicateClosePanicHoldsNothing: the same when the policy built
// second for a key, closed unused, panics in its Close.
func TestDuplicateClosePanicHoldsNothing(t *testing.T) {
	gate := make(chan struct{})
	first := make(chan struct{})
	var n int
	g := newGroup(t, keyed.Config{MaxKeys: 1, New: func(string, string) (policy.Policy, error) {
		n++
		if n == 1 {
			close(first)
			<-gate // the second call builds and adds its policy meanwhile
			return panicClose{panics: true}, nil
		}
		return panicClose{}, nil
	}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		g.Execute(key("a"), nop) // built first, added second: closed unused
	}()
	<-first
	if err := g.Execute(key("a"), nop); err != nil {
		t.Fatal(err)
	}
	close(gate)
	<-done
	func() {
		defer func() { recover() }()
		g.Execute(key("b"), nop)
	}()
	if err := g.Execute(key("c"), nop); err != nil && reason(err) == "keyed/keys_full" {
		t.Errorf("a new key while no call runs = %v: key a is held for good", err)
	}
}

// TestKeyRetainsNoLargerString: a Group keeps at most MaxKeys keys of at
// most MaxKeyLen bytes; a short key cut from a large string (a token, a
// header, a path) must not keep the large string alive.
func TestKeyRetainsNoLargerString(t *testing.T) {
	const maxKeys, big = 16, 4 << 20
	g := newGroup(t, keyed.Config{MaxKeys: maxKeys, New: func(string, string) (policy.Policy, error) {
		return panicFree{}, nil
	}})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range maxKeys {
		s := strings.Repeat(string(rune('a'+i)), big) // a fresh 4 MiB string
		if err := g.Execute(key(s[:16]), nop); err != nil {
			t.Fatal(err)
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > big {
		t.Errorf("heap grew by %d MiB for %d live keys of 16 bytes", grown>>20, g.Keys())
	}
}

type panicFree struct{}

func (panicFree) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }
