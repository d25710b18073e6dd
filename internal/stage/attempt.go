package stage

import (
	"context"
	"sync/atomic"
	"time"
)

// record is the record of an attempt, carried in its context under one
// key. Each layer that starts an attempt adds its own part, wrapping the
// enclosing record's context: a retry's attempt n (n > 0, and the record
// wraps the retry's call), a hedged attempt -n (n < 0), or an adaptive
// limit's sample (s). Readers walk outwards to the part they need, so a
// layer copies and looks up nothing when it starts an attempt.
type record struct {
	context.Context
	n int
	s *Sample
}

type recordKey struct{}

func (r *record) Value(key any) any {
	if key == (recordKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// innermost returns the innermost record in ctx, or nil.
func innermost(ctx context.Context) *record {
	r, _ := ctx.Value(recordKey{}).(*record)
	return r
}

// WithRetry returns the context of attempt n of a retry's call.
func WithRetry(call context.Context, n int) context.Context {
	return &record{Context: call, n: n}
}

// hedgeRecord is a hedged attempt's record, and its call's Tried under a
// key of its own: a retry's record stays small.
type hedgeRecord struct {
	record
	tried *Tried
}

type triedKey struct{}

func (h *hedgeRecord) Value(key any) any {
	switch key {
	case recordKey{}:
		return &h.record
	case triedKey{}:
		return h.tried
	}
	return h.Context.Value(key)
}

// WithHedge returns the context of hedged attempt n, whose call's
// attempts share tried.
func WithHedge(ctx context.Context, n int, tried *Tried) context.Context {
	return &hedgeRecord{record: record{Context: ctx, n: -n}, tried: tried}
}

// Tried is the set of endpoints (route.Router's, by index) that the
// attempts of one hedged call were sent to. The zero value is empty. It is
// safe for concurrent use.
type Tried struct{ bits atomic.Uint64 }

// Add adds the endpoints of bits.
func (t *Tried) Add(bits uint64) { t.bits.Or(bits) }

// Load returns the endpoints tried.
func (t *Tried) Load() uint64 { return t.bits.Load() }

// HedgeTried returns the Tried of the innermost hedge ctx runs under, or
// nil.
func HedgeTried(ctx context.Context) *Tried {
	t, _ := ctx.Value(triedKey{}).(*Tried)
	return t
}

// Retry returns the number of the attempt ctx belongs to under the
// innermost retry, and that retry's call, or 0 and nil.
func Retry(ctx context.Context) (n int, call context.Context) {
	for r := innermost(ctx); r != nil; r = innermost(r.Context) {
		if r.n > 0 {
			return r.n, r.Context
		}
	}
	return 0, nil
}

// Hedge returns the number of the attempt ctx belongs to under the
// innermost hedge, or 0.
func Hedge(ctx context.Context) int {
	for r := innermost(ctx); r != nil; r = innermost(r.Context) {
		if r.n < 0 {
			return -r.n
		}
	}
	return 0
}

// Sample is a sample of an attempt: when it began and when the dependency
// answered. httppolicy's Transport marks the answer (the response
// headers) with [Answered], and the first byte that counts of a streamed
// body with [FirstByte]; a stream read after that is not latency.
type Sample struct {
	start time.Time
	// firstByte: only FirstByte marks the answer (a breaker's slow rule);
	// else Answered does (an adaptive limit).
	firstByte bool
	// answered is the time from start to the answer plus 1 ns; 0: none
	// yet; -1: the attempt has ended, and a late mark counts nothing.
	answered atomic.Int64
	// count, if set, is told +1 at the answer and -1 when an answered
	// attempt ends.
	count func(delta int)
	tag   any // see Tag
}

// sampleRecord carries a record and its Sample: one allocation.
type sampleRecord struct {
	record
	s Sample
}

// Begin starts a sample of the attempt ctx belongs to, ended by its first
// byte if firstByte, else by its answer, and returns the context that
// carries it.
func Begin(ctx context.Context, count func(delta int), firstByte bool) (context.Context, *Sample) {
	return BeginAt(ctx, count, firstByte, time.Now(), nil)
}

// BeginAt is Begin for a sample started at start, whose attempt's context
// carries tag (see [Tag]).
func BeginAt(ctx context.Context, count func(delta int), firstByte bool, start time.Time, tag any) (context.Context, *Sample) {
	c := &sampleRecord{record: record{Context: ctx}}
	c.s.start = start
	c.s.tag = tag
	c.s.count = count
	c.s.firstByte = firstByte
	c.record.s = &c.s
	return &c.record, &c.s
}

// Tag returns the tag of the innermost sample of ctx that has one, or nil.
func Tag(ctx context.Context) any {
	for r := innermost(ctx); r != nil; r = innermost(r.Context) {
		if r.s != nil && r.s.tag != nil {
			return r.s.tag
		}
	}
	return nil
}

// Answered marks the answer of the attempt ctx belongs to, in its sample
// and in those of enclosing layers, but for the samples ended by the first
// byte. Only the first mark of each counts.
func Answered(ctx context.Context) { mark(ctx, false) }

// FirstByte marks the first byte that counts of the answer of the attempt
// ctx belongs to, in every sample not yet marked.
func FirstByte(ctx context.Context) { mark(ctx, true) }

func mark(ctx context.Context, firstByte bool) {
	for r := innermost(ctx); r != nil; r = innermost(r.Context) {
		if s := r.s; s != nil && (firstByte || !s.firstByte) &&
			s.answered.CompareAndSwap(0, int64(time.Since(s.start))+1) && s.count != nil {
			s.count(1)
		}
	}
}

// Answered reports whether the answer of the sample's attempt has been
// marked (and the sample has not ended).
func (s *Sample) Answered() bool { return s.answered.Load() > 0 }

// End ends the sample at now and returns its latency: up to its answer,
// if one was marked, else up to now.
func (s *Sample) End(now time.Time) time.Duration {
	v := s.answered.Swap(-1)
	if v <= 0 {
		return now.Sub(s.start)
	}
	if s.count != nil {
		s.count(-1)
	}
	return time.Duration(v - 1)
}
