package redisstate

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/statuspage"
)

var _ statuspage.Reporter = (*Budget)(nil)

// Budget is a global concurrency budget: at most Limit calls in flight at
// once across every replica that shares its Name and Redis. Each admitted
// call holds a lease in Redis, taken and renewed by Lua scripts and
// released when the call ends. A crashed replica's leases lapse after
// LeaseTTL. A Budget goes in a pipeline's Bulkhead slot, with an optional
// local bulkhead consulted first. Build one with [NewBudget]; the zero
// value is not usable. A Budget is safe for concurrent use by multiple
// goroutines.
//
// A call admitted while Redis answers holds a lease, and Redis holds at
// most Limit leases at once. A call runs without a lease when the
// [Fallback] mode admitted it while Redis could not be asked. It also does
// when Redis lost its lease: in a failover (replication is asynchronous),
// a restart without persistence, or an outage longer than LeaseTTL. Such
// calls run on until they end, beside up to Limit calls that hold leases.
// Let k be the number of times Redis lost leases since the oldest call in
// flight began. The fleet can then run up to (1 + k) x Limit calls with
// FailClosed; with LocalShare, that plus the sum of the replicas' shares;
// with FailOpen, as many as the local bulkheads let through.
//
// [Budget.Report] shows this replica's view on a status page: its calls
// in flight and waiting, the live replicas Redis reported, the fallback,
// and whether Redis is reachable.
type Budget struct {
	name     string
	conn     *conn
	limit    int
	local    *bulkhead.Bulkhead // BudgetConfig.Local, or nil
	ttl      time.Duration
	ttlMS    string // ttl in milliseconds, as the scripts take it
	repTTLMS string
	renew    time.Duration
	maxWait  time.Duration
	mode     Fallback
	share    int // BudgetConfig.LocalShare; 0: from replicas
	replica  string
	keys     []string // leases, replicas, since
	limitArg string

	seq      atomic.Uint64
	inflight atomic.Int64 // calls admitted and not yet ended, leased or not
	waiting  atomic.Int64
	replicas replicaCount // live replicas Redis reported

	// ghosts are lease ids whose acquire failed without an answer: Redis
	// may have run the script (a frozen Redis runs it when it wakes), so
	// the next release removes them with its own lease, in one ZREM.
	ghostMu sync.Mutex
	ghosts  []any
	haunted atomic.Bool // ghosts is not empty

	rejFull, rejWait, rejUnavailable *rejection
	fallback                         *fallbackRecord
	onReject                         func(context.Context, *policy.RejectedError)

	closeOnce sync.Once
	reg       metric.Registration
}

// NewBudget returns a Budget configured by cfg, or an error naming the
// first invalid field. It does not contact Redis. Call [Budget.Close] when
// done with it.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newConn(cfg.Redis, KindBudget, cfg.Name, cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	ttl := cfg.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	m := meterOf(cfg.MeterProvider)
	rejections := rejectionCounter(m)
	prefix := keyPrefix("budget", cfg.Name)
	b := &Budget{
		name:     cfg.Name,
		conn:     c,
		limit:    cfg.Limit,
		ttl:      ttl,
		ttlMS:    strconv.FormatInt(ttl.Milliseconds(), 10),
		repTTLMS: strconv.FormatInt(max(3*ttl, 30*time.Second).Milliseconds(), 10),
		renew:    ttl / 3,
		maxWait:  cfg.MaxWait,
		mode:     cfg.Fallback,
		share:    cfg.LocalShare,
		replica:  cfg.Replica,
		keys:     []string{prefix + "leases", prefix + "replicas", prefix + "replicas:since"},
		limitArg: strconv.Itoa(cfg.Limit),
		local:    cfg.Local,
		rejFull:  newRejection(rejections, KindBudget, cfg.Name, bulkhead.ReasonFull, bulkhead.ErrFull),
		rejWait:  newRejection(rejections, KindBudget, cfg.Name, bulkhead.ReasonWaitTimeout, bulkhead.ErrFull),
		rejUnavailable: newRejection(rejections, KindBudget, cfg.Name, ReasonRedisUnavailable,
			bulkhead.ErrFull),
		fallback: newFallbackRecord(m, KindBudget, cfg.Name, cfg.Fallback.String()),
		onReject: cfg.OnReject,
	}
	if b.replica == "" {
		b.replica = newReplicaID()
	}
	b.reg = b.registerObservers(m)
	return b, nil
}

// Execute runs fn once the call holds a slot of Local (if set) and a lease,
// or was admitted by the fallback. It gives both back when fn returns,
// panics or calls runtime.Goexit, and returns fn's error unchanged. If fn
// cannot run, nothing is held, and Execute returns a rejection matching
// bulkhead.ErrFull and policy.ErrRejected (reason "full", "wait_timeout"
// or "redis_unavailable"), Local's own rejection, or ctx.Err(). A caller
// that gives up while a lease is being taken gets ctx.Err() when that
// round trip ends, within CallTimeout; a lease taken meanwhile is released
// at once. Execute panics if ctx or fn is nil.
func (b *Budget) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("redisstate: nil Context")
	}
	if fn == nil {
		panic("redisstate: nil fn")
	}
	if b.local != nil {
		slot, err := b.local.Acquire(ctx)
		if err != nil {
			return err
		}
		// Deferred, so that it also runs if fn panics or calls
		// runtime.Goexit: the slot is never lost, and the panic goes on.
		defer slot.Release()
	}
	l, err := b.admit(ctx)
	if err != nil {
		return err
	}
	// Runs before the slot's release (deferred calls run last in, first
	// out), on a panic or Goexit in fn too.
	defer b.end(ctx, l)
	return fn(ctx)
}

// lease is one admitted call: its lease in Redis, if it has one.
type lease struct {
	b     *Budget
	id    string // "" if admitted by the fallback
	mu    sync.Mutex
	timer *time.Timer // renews the lease; nil without one
	ended bool
}

// end ends a call admit admitted: it stops the renewal and releases the
// lease (one round trip; if it fails, the lease lapses after LeaseTTL).
func (b *Budget) end(ctx context.Context, l *lease) {
	if l.id != "" {
		l.mu.Lock()
		l.ended = true
		if l.timer != nil {
			l.timer.Stop()
		}
		l.mu.Unlock()
		// The caller may have given up (ctx canceled) while fn ran: the
		// lease must be released all the same.
		b.releaseIDs(ctx, b.takeGhosts(l.id))
	}
	b.inflight.Add(-1)
}

// admit takes a lease, waiting up to MaxWait, or applies the fallback.
func (b *Budget) admit(ctx context.Context) (*lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := b.replica + ":" + strconv.FormatUint(b.seq.Add(1), 36)
	var deadline time.Time
	pause := time.Millisecond
	for {
		ok, err := b.tryAcquire(ctx, id)
		if err != nil {
			// Nothing was sent if the guard refused, or the server is
			// known to be too old.
			if !errors.Is(err, breaker.ErrOpen) && !errors.Is(err, ErrRedisTooOld) {
				// No answer: Redis may have run the script all the same.
				b.addGhost(id)
			}
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return b.onUnavailable(ctx, err)
		}
		if ok && ctx.Err() != nil {
			// The caller gave up while the lease was being taken.
			b.releaseIDs(ctx, []any{id})
			return nil, ctx.Err()
		}
		if ok {
			b.inflight.Add(1)
			l := &lease{b: b, id: id}
			l.mu.Lock()
			l.timer = time.AfterFunc(b.renew, l.renewLease)
			l.mu.Unlock()
			return l, nil
		}
		if b.maxWait == 0 {
			return nil, b.reject(ctx, b.rejFull)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(b.maxWait)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, b.reject(ctx, b.rejWait)
		}
		// Jittered, so that replicas waiting together do not ask together.
		d := min(pause/2+rand.N(pause/2+1), left)
		if err := b.sleep(ctx, d); err != nil {
			return nil, err
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// sleep waits d or until ctx is done, counting the caller as waiting.
func (b *Budget) sleep(ctx context.Context, d time.Duration) error {
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryAcquire asks Redis for the lease id once. The round trip is not cut
// short when the caller gives up (only by CallTimeout), so that a canceled
// caller does not leave a lease taken behind its back: admit releases it.
func (b *Budget) tryAcquire(ctx context.Context, id string) (bool, error) {
	var res []int64
	err := b.conn.do(context.WithoutCancel(ctx), func(ctx context.Context) error {
		var err error
		res, err = acquireScript.Run(ctx, b.conn.client, b.keys,
			b.limitArg, b.ttlMS, id, b.replica, b.repTTLMS).Int64Slice()
		return err
	})
	if err != nil {
		return false, err
	}
	if len(res) != 4 {
		return false, errorf("acquire script returned %v", res)
	}
	b.replicas.note(res[1], res[2] == 1, res[3])
	return res[0] == 1, nil
}

// onUnavailable applies the fallback to a call Redis could not admit
// (cause is the round trip's error). A FailClosed rejection of a server
// too old wraps cause, so that it matches ErrRedisTooOld and names the
// version.
func (b *Budget) onUnavailable(ctx context.Context, cause error) (*lease, error) {
	b.fallback.record(ctx)
	switch b.mode {
	case FailOpen:
		b.inflight.Add(1)
		return &lease{b: b}, nil
	case FailClosed:
		return nil, unavailable(b.reject(ctx, b.rejUnavailable), cause)
	}
	share := b.localShare()
	for {
		n := b.inflight.Load()
		if n >= share {
			return nil, b.reject(ctx, b.rejFull)
		}
		if b.inflight.CompareAndSwap(n, n+1) {
			return &lease{b: b}, nil
		}
	}
}

// localShare returns the calls this replica may have in flight under the
// LocalShare fallback.
func (b *Budget) localShare() int64 {
	if b.share != 0 {
		return int64(b.share)
	}
	r := max(b.replicas.load(), 1)
	return (int64(b.limit) + r - 1) / r
}

// renewLease pushes the lease's expiry back, and arms the next renewal
// unless the call has ended. It runs on a timer's goroutine.
func (l *lease) renewLease() {
	b := l.b
	var ok int64
	err := b.conn.do(context.Background(), func(ctx context.Context) error {
		var err error
		ok, err = renewScript.Run(ctx, b.conn.client, b.keys[:1], l.id, b.ttlMS).Int64()
		return err
	})
	if err == nil && ok == 0 {
		// Lapsed: the call runs on without a lease (Redis was away for
		// longer than LeaseTTL, or lost it in a failover), and nothing
		// renews it again.
		return
	}
	l.mu.Lock()
	if !l.ended {
		l.timer.Reset(b.renew)
	}
	l.mu.Unlock()
}

// releaseIDs removes the leases ids (the first one's, then ghosts) in one
// ZREM; if it fails, the ghosts are kept for the next release and the
// first lease lapses after LeaseTTL. The caller may have given up (ctx
// canceled): the leases are released all the same.
func (b *Budget) releaseIDs(ctx context.Context, ids []any) {
	if len(ids) == 0 {
		return
	}
	err := b.conn.do(context.WithoutCancel(ctx), func(ctx context.Context) error {
		return b.conn.client.ZRem(ctx, b.keys[0], ids...).Err()
	})
	if err != nil && len(ids) > 1 {
		b.putGhosts(ids[1:])
	}
}

// maxGhosts bounds the ghosts kept: past it, a ghost lease just lapses
// after LeaseTTL.
const maxGhosts = 256

func (b *Budget) addGhost(id string) {
	b.ghostMu.Lock()
	if len(b.ghosts) < maxGhosts {
		b.ghosts = append(b.ghosts, id)
		b.haunted.Store(true)
	}
	b.ghostMu.Unlock()
}

// takeGhosts returns id followed by the ghosts, which it clears.
func (b *Budget) takeGhosts(id string) []any {
	if !b.haunted.Load() {
		return []any{id}
	}
	b.ghostMu.Lock()
	out := append([]any{id}, b.ghosts...)
	b.ghosts = b.ghosts[:0]
	b.haunted.Store(false)
	b.ghostMu.Unlock()
	return out
}

// putGhosts gives back ghosts a failed release could not remove.
func (b *Budget) putGhosts(g []any) {
	for _, id := range g {
		b.addGhost(id.(string))
	}
}

// reject records a rejection and calls OnReject.
func (b *Budget) reject(ctx context.Context, r *rejection) error {
	err := r.record(ctx)
	if b.onReject != nil {
		b.onReject(ctx, r.err)
	}
	return err
}

// InFlight returns the number of calls this replica has admitted and not
// yet ended, with a lease or by the fallback.
func (b *Budget) InFlight() int { return int(b.inflight.Load()) }

// Limit returns BudgetConfig.Limit.
func (b *Budget) Limit() int { return b.limit }

// Replica returns the identity of this replica in Redis.
func (b *Budget) Replica() string { return b.replica }

// Report returns the budget's state for a status page (see
// [statuspage.Reporter]): this replica's view, and whether Redis is
// reachable. It reads atomics only, and never asks Redis.
func (b *Budget) Report() statuspage.Report {
	replicas := "not reported"
	if n := b.replicas.load(); n > 0 {
		replicas = strconv.FormatInt(n, 10)
	}
	fallback := b.mode.String()
	if b.mode == LocalShare {
		fallback += " (" + strconv.FormatInt(b.localShare(), 10) + " here)"
	}
	f := []statuspage.Field{
		{Name: "replica", Value: b.replica},
		{Name: "limit", Value: strconv.Itoa(b.limit)},
		{Name: "in flight here", Value: strconv.FormatInt(b.inflight.Load(), 10)},
		{Name: "waiting here", Value: strconv.FormatInt(b.waiting.Load(), 10)},
		{Name: "live replicas", Value: replicas},
		{Name: "fallback", Value: fallback},
	}
	return statuspage.Report{Kind: KindBudget, Name: b.name, Fields: append(f, b.conn.reachability()...)}
}

// registerObservers registers the watertight.bulkhead.active and queued
// counters under kind "budget": this replica's calls in flight and waiting.
func (b *Budget) registerObservers(m metric.Meter) metric.Registration {
	active, queued := slotCounters(m)
	if active == nil || queued == nil {
		return nil
	}
	opt := metric.WithAttributeSet(attribute.NewSet(policyAttrs(KindBudget, b.name)...))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(active, b.inflight.Load(), opt)
		o.ObserveInt64(queued, b.waiting.Load(), opt)
		return nil
	}, active, queued)
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return reg
}

// Close unregisters the budget's observable instruments. In one round
// trip, it removes the leases that unanswered acquires may have left. It
// does not close Redis.Client or Local, and does not end calls in flight,
// whose leases are released as they end. It always returns nil and may be
// called more than once.
func (b *Budget) Close() error {
	b.closeOnce.Do(func() {
		if b.haunted.Load() { // one last try: the ghosts would lapse anyway
			ids := b.takeGhosts("")
			b.releaseIDs(context.Background(), ids[1:])
		}
		if b.reg != nil {
			if err := b.reg.Unregister(); err != nil {
				otel.Handle(err)
			}
		}
		b.conn.close()
	})
	return nil
}
