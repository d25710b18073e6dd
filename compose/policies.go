package compose

import (
	"fmt"
	"slices"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/internal/nilcheck"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// Policies names the policy in each slot of a [Pipeline]. A nil slot is
// skipped. The zero value is a pipeline with no policy, which only records
// telemetry.
type Policies struct {
	// Bulkhead limits calls in flight and queued (usually *bulkhead.Bulkhead).
	Bulkhead policy.Policy
	// Deadline bounds the whole call, retries included (usually
	// *deadline.Deadline).
	Deadline policy.Policy
	// Retry repeats failed attempts (usually *retry.Retry).
	Retry policy.Policy
	// RateLimit admits each attempt, retries included, at the pace the
	// dependency allows (usually *ratelimit.Limiter): a held attempt waits
	// here, before the breaker, so it takes no half-open probe, but keeps
	// its Bulkhead slot.
	RateLimit policy.Policy
	// Breaker stops calling a failing dependency (usually *breaker.Breaker).
	Breaker policy.Policy
	// Attempt bounds each attempt (usually a second *deadline.Deadline).
	Attempt policy.Policy

	// Route, if set, sends each attempt to one of its endpoints, below
	// Retry: the RateLimit, Breaker and Attempt slots are then each
	// endpoint's own (route.Endpoint), and must be nil here.
	Route *route.Router
}

// timeouter is implemented by deadline.Deadline; compose checks the
// slots through it, so that any policy with a timeout is checked.
type timeouter interface {
	Timeout() time.Duration
}

// named is a slot of Policies and its field's name.
type named struct {
	field string
	p     policy.Policy
}

// slots returns the slots in the order calls run through them.
func (p Policies) slots() []named {
	return []named{{"Bulkhead", p.Bulkhead}, {"Deadline", p.Deadline}, {"Retry", p.Retry},
		{"RateLimit", p.RateLimit}, {"Breaker", p.Breaker}, {"Attempt", p.Attempt}}
}

func (p Policies) validate() error {
	if err := p.validateRoute(); err != nil {
		return err
	}
	for _, s := range p.slots() {
		if s.p == nil {
			continue
		}
		// A typed nil pointer is no nil slot: it would panic on the first
		// call, so New refuses it.
		if nilcheck.Pointer(s.p) {
			return fmt.Errorf("compose: Policies.%s is a nil %T; leave the slot nil to skip it", s.field, s.p)
		}
		// compose reports latencies only to the Bulkhead slot's adaptive
		// limit; elsewhere it would never learn.
		if _, ok := s.p.(*adaptive.Limiter); ok && s.field != "Bulkhead" {
			return fmt.Errorf("compose: Policies.%s holds a %T, which learns from each attempt's latency; it works only in the Bulkhead slot", s.field, s.p)
		}
	}
	d, dok := p.Deadline.(timeouter)
	a, aok := p.Attempt.(timeouter)
	// A Deadline of timeout 0 (the zero deadline.Deadline) imposes none.
	if dok && aok && d.Timeout() > 0 && a.Timeout() > d.Timeout() {
		return fmt.Errorf("compose: Policies.Attempt timeout %v is longer than Policies.Deadline timeout %v", a.Timeout(), d.Timeout())
	}
	return nil
}

// validateRoute refuses a typed nil Route, and a Route beside the slots
// its endpoints fill.
func (p Policies) validateRoute() error {
	if p.Route == nil {
		return nil
	}
	for _, s := range p.slots()[3:] {
		if s.p != nil {
			return fmt.Errorf("compose: Policies.%s and Policies.Route are both set: with a Route, each route.Endpoint has its own %s", s.field, s.field)
		}
	}
	d, dok := p.Deadline.(timeouter)
	for i, e := range p.Route.Endpoints() {
		for _, pol := range e.Policies() {
			if _, ok := pol.(*retry.Retry); ok {
				return fmt.Errorf("compose: Policies.Route: endpoint %d (%q) holds a %T; put it in the Retry slot", i, e.Name, pol)
			}
		}
		if a, ok := e.Attempt.(timeouter); ok && dok && d.Timeout() > 0 && a.Timeout() > d.Timeout() {
			return fmt.Errorf("compose: Policies.Route: endpoint %d (%q): Attempt timeout %v is longer than Policies.Deadline timeout %v", i, e.Name, a.Timeout(), d.Timeout())
		}
	}
	return nil
}

// routed returns, for each endpoint of the Route slot at index at of
// slots, slots with the endpoint's own slots after it.
func (p Policies) routed(slots []slot, at int) [][]slot {
	var out [][]slot
	for _, e := range p.Route.Endpoints() {
		s := slices.Clone(slots[:at+1])
		for _, pol := range e.Policies() {
			if pol != nil {
				s = append(s, slot{policy: pol, kind: kindOf(pol)})
			}
		}
		out = append(out, s)
	}
	return out
}

// build returns the filled slots in order, with an attempt's start after
// the first Retry, or, without one, below an adaptive limit or a
// keyed.Group in the Bulkhead slot (an adaptive limit learns from each
// attempt's latency).
func (p Policies) build() []slot {
	var out []slot
	attemptAt := -1
	for _, s := range p.slots() {
		if s.p == nil {
			continue
		}
		out = append(out, slot{policy: s.p, kind: kindOf(s.p)})
		if _, ok := s.p.(*retry.Retry); ok && attemptAt < 0 {
			attemptAt = len(out)
		}
	}
	// A keyed.Group there may hold adaptive limits, one per key.
	if attemptAt < 0 && len(out) > 0 && (out[0].kind == kindAdaptive || out[0].kind == kindKeyed) {
		attemptAt = 1
	}
	if attemptAt >= 0 {
		out = append(out[:attemptAt], append([]slot{{kind: kindAttempt}}, out[attemptAt:]...)...)
	}
	if p.Route != nil {
		out = append(out, slot{kind: kindRoute, router: p.Route})
	}
	return out
}
