package keyed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Group runs each call through the policy of its key. Create one with
// [NewGroup]; the zero value is not usable. A Group is safe for concurrent
// use.
type Group struct {
	name      string
	newPolicy func(key, label string) (policy.Policy, error)
	keyOf     func(context.Context) string
	maxKeys   int
	maxKeyLen int
	minIdle   time.Duration
	rest      policy.Policy
	labels    map[string]bool
	epoch     time.Time

	mu   sync.Mutex
	keys map[string]*entry
	idle idleList // the keys no call holds, most recently used first

	noKey, tooLong, full *telemetry.Rejection
}

// entry is one live key and its policy. Its fields but key and p are
// guarded by the Group's mutex.
type entry struct {
	key        string
	p          policy.Policy
	refs       int           // calls holding it
	idleSince  time.Duration // since the Group's epoch, when refs fell to 0
	prev, next *entry        // in the idle list while refs is 0
	gone       bool          // forgotten by Close: no list takes it back
}

var _ policy.Policy = (*Group)(nil)

// NewGroup returns a Group configured by cfg, or an error naming the first
// invalid field of cfg.
func NewGroup(cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rej := telemetry.Rejecter{In: telemetry.NewInstruments(cfg.MeterProvider), Kind: Kind, Name: cfg.Name, OnReject: cfg.OnReject}
	g := &Group{
		name:      cfg.Name,
		newPolicy: cfg.New,
		keyOf:     cfg.Key,
		maxKeys:   cfg.MaxKeys,
		maxKeyLen: cfg.MaxKeyLen,
		minIdle:   cfg.MinIdle,
		rest:      cfg.Rest,
		labels:    make(map[string]bool, len(cfg.Labels)),
		epoch:     time.Now(),
		keys:      make(map[string]*entry),
		noKey:     rej.New(ReasonNoKey, ErrNoPolicy),
		tooLong:   rej.New(ReasonKeyTooLong, ErrNoPolicy),
		full:      rej.New(ReasonKeysFull, ErrNoPolicy),
	}
	if g.keyOf == nil {
		g.keyOf = policy.KeyOf
	}
	if g.maxKeyLen == 0 {
		g.maxKeyLen = DefaultMaxKeyLen
	}
	for _, l := range cfg.Labels {
		g.labels[l] = true
	}
	return g, nil
}

// Held is one call's hold on the policy of its key, from
// [Group.Acquire]: the key's policy is not evicted while it is held. Call
// Release once the call is over. Release makes a Held zero, and the zero
// Held's Release does nothing; a copy is the same hold, so release only
// one of them.
type Held struct {
	g *Group
	e *entry // nil for Config.Rest
	p policy.Policy
}

// Policy returns the policy the call runs through: its key's, or
// Config.Rest.
func (h Held) Policy() policy.Policy { return h.p }

// Release ends the hold.
func (h *Held) Release() {
	g, e := h.g, h.e
	*h = Held{}
	if e == nil {
		return
	}
	var now time.Duration
	if g.minIdle > 0 {
		now = time.Since(g.epoch)
	}
	g.mu.Lock()
	if e.refs--; e.refs == 0 && !e.gone {
		e.idleSince = now
		g.idle.pushFront(e)
	}
	g.mu.Unlock()
}

// Execute runs fn through the policy of ctx's key, or through Config.Rest,
// and returns its error. It returns a rejection matching [ErrNoPolicy]
// without running fn if the call gets no policy (see the package doc), or
// New's error, wrapped. It panics if fn is nil.
func (g *Group) Execute(ctx context.Context, fn policy.Func) error {
	if fn == nil {
		panic("keyed: nil fn")
	}
	h, err := g.Acquire(ctx)
	if err != nil {
		return err
	}
	// Deferred, so that a panic in fn does not keep the key held.
	defer h.Release()
	return h.p.Execute(ctx, fn)
}

// Acquire is the two-step form of Execute: it finds, or builds, the
// policy of ctx's key and holds it. Run the call through h.Policy(), then
// call h.Release.
func (g *Group) Acquire(ctx context.Context) (h Held, err error) {
	k := g.keyOf(ctx)
	switch {
	case k == "":
		return g.toRest(ctx, g.noKey)
	case len(k) > g.maxKeyLen:
		return g.toRest(ctx, g.tooLong)
	}
	g.mu.Lock()
	if e, ok := g.keys[k]; ok {
		g.holdLocked(e)
		g.mu.Unlock()
		return Held{g: g, e: e, p: e.p}, nil
	}
	room := len(g.keys) < g.maxKeys || g.evictableLocked()
	g.mu.Unlock()
	if !room {
		// Checked before New, so that keys nobody can serve cost no policy.
		return g.toRest(ctx, g.full)
	}
	return g.add(ctx, k)
}

// add builds the policy of k and makes it live, held by the caller.
func (g *Group) add(ctx context.Context, k string) (Held, error) {
	k = strings.Clone(k) // a key cut from a larger string must not keep it alive
	label := LabelOther
	if g.labels[k] {
		label = k
	}
	p, err := g.newPolicy(k, label)
	if err == nil && p == nil {
		err = errors.New("New returned a nil policy")
	}
	if err != nil {
		return Held{}, fmt.Errorf("keyed: %sbuilding the policy of a key: %w", named(g.name), err)
	}
	g.mu.Lock()
	if e, ok := g.keys[k]; ok { // built by another call meanwhile
		g.holdLocked(e)
		g.mu.Unlock()
		h := Held{g: g, e: e, p: e.p}
		closeHeld(&h, p)
		return h, nil
	}
	var gone *entry
	if len(g.keys) >= g.maxKeys {
		if gone = g.evictLocked(); gone == nil {
			g.mu.Unlock()
			closePolicy(p)
			return g.toRest(ctx, g.full)
		}
	}
	e := &entry{key: k, p: p, refs: 1}
	g.keys[k] = e
	g.mu.Unlock()
	h := Held{g: g, e: e, p: p}
	if gone != nil {
		closeHeld(&h, gone.p)
	}
	return h, nil
}

// closeHeld closes p for a caller that holds h: if Close panics, h is
// released before the panic goes on, so that no key stays held.
func closeHeld(h *Held, p policy.Policy) {
	ok := false
	defer func() {
		if !ok {
			h.Release()
		}
	}()
	closePolicy(p)
	ok = true
}

// toRest returns a hold on Config.Rest, or rej's rejection without one.
func (g *Group) toRest(ctx context.Context, rej *telemetry.Rejection) (Held, error) {
	if g.rest != nil {
		return Held{p: g.rest}, nil
	}
	return Held{}, rej.Record(ctx)
}

// holdLocked adds a call to e's holders. g.mu is held.
func (g *Group) holdLocked(e *entry) {
	if e.refs == 0 {
		g.idle.remove(e)
	}
	e.refs++
}

// evictableLocked reports whether the least recently used key may be
// evicted now. g.mu is held.
func (g *Group) evictableLocked() bool {
	t := g.idle.tail
	return t != nil && (g.minIdle == 0 || time.Since(g.epoch)-t.idleSince >= g.minIdle)
}

// evictLocked evicts the least recently used key, if it may be, and
// returns it. g.mu is held.
func (g *Group) evictLocked() *entry {
	if !g.evictableLocked() {
		return nil
	}
	e := g.idle.tail
	g.idle.remove(e)
	delete(g.keys, e.key)
	return e
}

// Name returns Config.Name.
func (g *Group) Name() string { return g.name }

// MaxKeys returns Config.MaxKeys.
func (g *Group) MaxKeys() int { return g.maxKeys }

// Keys returns the number of keys live now.
func (g *Group) Keys() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}

// Close closes the policy of every live key that has a Close method and
// forgets them all. Calls still running through one go on. The Group
// remains usable: a key's next call builds its policy again. Close
// closes no Config.Rest. It always returns nil.
func (g *Group) Close() error {
	g.mu.Lock()
	keys := g.keys
	g.keys, g.idle = make(map[string]*entry), idleList{}
	for _, e := range keys {
		e.gone = true
	}
	g.mu.Unlock()
	for _, e := range keys {
		closePolicy(e.p)
	}
	return nil
}

// closePolicy closes p if it has a Close method.
func closePolicy(p policy.Policy) {
	switch c := p.(type) {
	case interface{ Close() error }:
		c.Close()
	case interface{ Close() }:
		c.Close()
	}
}

// named is "name: ", or nothing for a Group without a name.
func named(name string) string {
	if name == "" {
		return ""
	}
	return name + ": "
}
