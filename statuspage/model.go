package statuspage

import (
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

// State is what the page shows, and its JSON view.
type State struct {
	Time      time.Time       `json:"time"`
	Pipelines []PipelineState `json:"pipelines"`
}

// PipelineState is one pipeline's state: its slots in the order calls run
// through them, its route's endpoints, and its rejections.
type PipelineState struct {
	Name      string          `json:"name"`
	Slots     []SlotState     `json:"slots"`
	Endpoints []EndpointState `json:"endpoints,omitempty"`
	// Rejected is the number of calls rejected in the last minute, and
	// PerSecond the same, second by second, oldest first.
	Rejected   int64            `json:"rejected_last_minute"`
	PerSecond  []int64          `json:"rejected_per_second"`
	Rejections []RejectionState `json:"rejections,omitempty"`
}

// RejectionState is the calls one policy rejected for one reason in the
// last minute.
type RejectionState struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
	Calls  int64  `json:"calls"`
}

// SlotState is the state of the policy in one slot. One of its parts is
// set, by the policy's type: Report for a [Reporter]. Type names the type
// of any other. A rate limit whose shared quota (ratelimit.Config.Shared)
// is a Reporter sets Report too, with the quota's.
type SlotState struct {
	Slot      string          `json:"slot"`
	Type      string          `json:"type"`
	Name      string          `json:"name,omitempty"`
	Bulkhead  *BulkheadState  `json:"bulkhead,omitempty"`
	Breaker   *BreakerState   `json:"breaker,omitempty"`
	RateLimit *RateLimitState `json:"rate_limit,omitempty"`
	Retry     *RetryState     `json:"retry,omitempty"`
	Deadline  *DeadlineState  `json:"deadline,omitempty"`
	Keyed     *KeyedState     `json:"keyed,omitempty"`
	Report    *Report         `json:"report,omitempty"`
}

// BulkheadState is a bulkhead's or an adaptive limit's slots. MaxLimit
// is set for an adaptive limit, whose Limit is the one it learned.
type BulkheadState struct {
	Limit    int            `json:"limit"`
	MaxLimit int            `json:"max_limit,omitempty"`
	Active   int            `json:"active"`
	Queued   int            `json:"queued"`
	QueuedBy map[string]int `json:"queued_by_priority"`
}

// BreakerState is a breaker's state, and its counts while closed (zero
// otherwise; the HTML page shows them only then).
type BreakerState struct {
	State               string     `json:"state"`
	OpenUntil           *time.Time `json:"open_until,omitempty"`
	Forced              bool       `json:"forced,omitempty"`
	Requests            uint32     `json:"requests"`
	Successes           uint32     `json:"successes"`
	Failures            uint32     `json:"failures"`
	ConsecutiveFailures uint32     `json:"consecutive_failures"`
	SlowCalls           uint32     `json:"slow_calls"`
}

// RateLimitState is a rate limit's hold and its client-side rates.
type RateLimitState struct {
	HeldUntil         *time.Time `json:"held_until,omitempty"`
	Gated             bool       `json:"gated,omitempty"`
	RequestsPerSecond float64    `json:"requests_per_second,omitempty"`
	TokensPerMinute   float64    `json:"tokens_per_minute,omitempty"`
}

// KeyedState is a keyed.Group's keys: those live, and the most.
type KeyedState struct {
	Keys    int `json:"keys"`
	MaxKeys int `json:"max_keys"`
}

// RetryState is a retry's attempts, and its budget's balance if it has
// one.
type RetryState struct {
	MaxAttempts int      `json:"max_attempts"`
	Budget      *float64 `json:"budget_available,omitempty"`
}

// DeadlineState is a deadline's timeout.
type DeadlineState struct {
	Timeout string `json:"timeout"`
}

// EndpointState is one route endpoint's state (see route.EndpointStatus).
type EndpointState struct {
	Name     string  `json:"name"`
	InFlight int     `json:"in_flight"`
	Latency  float64 `json:"latency_seconds"`
	Load     float64 `json:"load_seconds"`
	Out      bool    `json:"out"`
	Ejected  bool    `json:"ejected"`
	// Slots are the endpoint's own RateLimit, Breaker and Attempt.
	Slots []SlotState `json:"slots,omitempty"`
}

// pipelineState reads p's state now, with its rejections from h.
func pipelineState(p Pipeline, h *history) PipelineState {
	pols := p.Policies()
	st := PipelineState{Name: p.Name()}
	for _, s := range []struct {
		slot string
		p    policy.Policy
	}{{"Bulkhead", pols.Bulkhead}, {"Deadline", pols.Deadline}, {"Retry", pols.Retry},
		{"RateLimit", pols.RateLimit}, {"Breaker", pols.Breaker}, {"Attempt", pols.Attempt}} {
		if s.p != nil {
			st.Slots = append(st.Slots, slotState(s.slot, s.p))
		}
	}
	if r := pols.Route; r != nil {
		st.Endpoints = endpoints(r)
	}
	st.PerSecond, st.Rejections = h.lastMinute()
	for _, n := range st.PerSecond {
		st.Rejected += n
	}
	return st
}

func endpoints(r *route.Router) []EndpointState {
	var out []EndpointState
	cfg := r.Config().Endpoints
	for i, e := range r.Status() {
		st := EndpointState{Name: e.Name, InFlight: e.InFlight, Latency: e.Latency, Load: e.Load, Out: e.Out, Ejected: e.Ejected}
		for k, p := range cfg[i].Policies() {
			if p != nil {
				st.Slots = append(st.Slots, slotState([3]string{"RateLimit", "Breaker", "Attempt"}[k], p))
			}
		}
		out = append(out, st)
	}
	return out
}

// slotState reads the state of p, in slot.
func slotState(slot string, p policy.Policy) SlotState {
	s := SlotState{Slot: slot}
	switch p := p.(type) {
	case *bulkhead.Bulkhead:
		s.Type, s.Name = "bulkhead", p.Config().Name
		s.Bulkhead = &BulkheadState{Limit: p.Limit(), Active: p.Active(), Queued: p.Queued(), QueuedBy: byPriority(p.QueuedBy)}
	case *adaptive.Limiter:
		s.Type, s.Name = "adaptive", p.Config().Name
		s.Bulkhead = &BulkheadState{Limit: p.Limit(), MaxLimit: p.MaxLimit(), Active: p.Active(), Queued: p.Queued(), QueuedBy: byPriority(p.QueuedBy)}
	case *breaker.Breaker:
		s.Type, s.Name = "breaker", p.Config().Name
		s.Breaker = breakerState(p.Snapshot())
	case *ratelimit.Limiter:
		c := p.Config()
		s.Type, s.Name = "ratelimit", c.Name
		s.RateLimit = rateLimitState(p.Status())
		if r, ok := c.Shared.(Reporter); ok {
			rep := r.Report()
			s.Report = &rep
		}
	case *retry.Retry:
		c := p.Config()
		s.Type, s.Name = "retry", c.Name
		s.Retry = &RetryState{MaxAttempts: c.MaxAttempts}
		if c.Budget != nil {
			a := c.Budget.Available()
			s.Retry.Budget = &a
		}
	case *keyed.Group:
		s.Type, s.Name = "keyed", p.Name()
		s.Keyed = &KeyedState{Keys: p.Keys(), MaxKeys: p.MaxKeys()}
	case *deadline.Deadline:
		s.Type, s.Name = "deadline", p.Config().Name
		s.Deadline = &DeadlineState{Timeout: p.Timeout().String()}
	case Reporter:
		r := p.Report()
		s.Type, s.Name, s.Report = r.Kind, r.Name, &r
	default:
		s.Type = typeName(p)
	}
	return s
}

func byPriority(queued func(policy.Priority) int) map[string]int {
	out := map[string]int{}
	for _, p := range []policy.Priority{policy.PrioritySheddable, policy.PriorityDefault, policy.PriorityCritical} {
		out[p.String()] = queued(p)
	}
	return out
}

func breakerState(s breaker.Snapshot) *BreakerState {
	b := &BreakerState{State: s.State.String(), Forced: s.Forced, Requests: s.Counts.Requests,
		Successes: s.Counts.TotalSuccesses, Failures: s.Counts.TotalFailures,
		ConsecutiveFailures: s.Counts.ConsecutiveFailures, SlowCalls: s.Counts.SlowCalls}
	if !s.Until.IsZero() {
		b.OpenUntil = &s.Until
	}
	return b
}

func rateLimitState(s ratelimit.Status) *RateLimitState {
	r := &RateLimitState{Gated: s.Gated, RequestsPerSecond: s.RequestsPerSecond, TokensPerMinute: s.TokensPerMinute}
	if !s.HeldUntil.IsZero() {
		r.HeldUntil = &s.HeldUntil
	}
	return r
}

// Pipeline is what the page shows of a pipeline: a *watertight.Pipeline
// or a *compose.Pipeline.
type Pipeline interface {
	Name() string
	Policies() compose.Policies
	CountRejections()
	Rejections() []compose.RejectionCount
}
