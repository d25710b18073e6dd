package redisstate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/statuspage"
)

// KindQuota is the kind of a [Quota].
const KindQuota = "quota"

// flushEvery is how often a Quota sends what its replica owes when no
// attempt has carried it to Redis since.
const flushEvery = 100 * time.Millisecond

// quotaReplicaTTL is how long Redis counts a replica of a quota after its
// last round trip.
const quotaReplicaTTL = 30 * time.Second

var (
	_ ratelimit.Shared    = (*Quota)(nil)
	_ statuspage.Reporter = (*Quota)(nil)
)

// Quota is a rate quota shared by every replica that uses its Name and
// Redis: at most Requests attempts and Tokens tokens per Interval across
// the fleet. Put it in a ratelimit.Config's Shared field: the Limiter then
// asks it for every attempt after its own hold, gate and rates. Build one
// with [NewQuota]; the zero value is not usable. A Quota is safe for
// concurrent use by multiple goroutines.
//
// See "A shared quota" in the package doc for how it admits, settles,
// holds and falls back.
type Quota struct {
	name     string
	conn     *conn
	keys     []string // requests, tokens, hold, replicas, since
	args     [5]string
	interval time.Duration
	requests float64 // per interval
	tokens   float64
	burst    float64
	tokBurst float64
	mode     Fallback
	share    int
	replica  string
	replicas replicaCount

	owedReq  atomic.Int64 // attempts Redis has not counted (fallback admissions, refunds)
	owedTok  atomic.Int64 // tokens Redis has not counted (settlements, fallback admissions)
	owedAt   atomic.Int64 // when the oldest of them was owed, Unix ns (0: none)
	holdUS   atomic.Int64 // a hold to send, in us (0: none)
	lastTrip atomic.Int64 // when the last round trip began, Unix ns
	waiting  atomic.Int64

	localMu  sync.Mutex // guards the local share's limiters
	localN   int64      // the replica count they were built for
	localReq *rate.Limiter
	localTok *rate.Limiter

	rejRate, rejHold, rejUnavailable *rejection
	fallback                         *fallbackRecord
	onReject                         func(context.Context, *policy.RejectedError)

	kick      chan struct{}
	done      chan struct{}
	flushed   chan struct{}
	closeOnce sync.Once
}

// NewQuota returns a Quota configured by cfg, or an error naming the first
// invalid field. It does not contact Redis. It starts a goroutine that
// sends settlements and holds no attempt has carried: call [Quota.Close]
// when done with it.
func NewQuota(cfg QuotaConfig) (*Quota, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newConn(cfg.Redis, KindQuota, cfg.Name, cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	m := meterOf(cfg.MeterProvider)
	rejections := rejectionCounter(m)
	prefix := keyPrefix(KindQuota, cfg.Name)
	q := &Quota{
		name:     cfg.Name,
		conn:     c,
		keys:     []string{prefix + "requests", prefix + "tokens", prefix + "hold", prefix + "replicas", prefix + "replicas:since"},
		interval: cfg.Interval,
		requests: cfg.Requests,
		tokens:   cfg.Tokens,
		burst:    oneSecond(cfg.Burst, cfg.Requests, cfg.Interval),
		tokBurst: oneSecond(cfg.TokenBurst, cfg.Tokens, cfg.Interval),
		mode:     cfg.Fallback,
		share:    cfg.Replicas,
		replica:  cfg.Replica,
		rejRate:  newRejection(rejections, KindQuota, cfg.Name, ratelimit.ReasonRate, ratelimit.ErrLimited),
		rejHold:  newRejection(rejections, KindQuota, cfg.Name, ratelimit.ReasonThrottled, ratelimit.ErrLimited),
		rejUnavailable: newRejection(rejections, KindQuota, cfg.Name, ReasonRedisUnavailable,
			ratelimit.ErrLimited),
		fallback: newFallbackRecord(m, KindQuota, cfg.Name, cfg.Fallback.String()),
		onReject: cfg.OnReject,
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		flushed:  make(chan struct{}),
	}
	if q.replica == "" {
		q.replica = newReplicaID()
	}
	q.args = q.scriptArgs()
	go q.flusher()
	return q, nil
}

// scriptArgs returns quotaScript's fixed arguments: the us per request
// and its burst, per token and its burst, and the horizon.
func (q *Quota) scriptArgs() [5]string {
	us := float64(q.interval / time.Microsecond)
	var a [5]string
	per := func(n float64) float64 {
		if n == 0 {
			return 0
		}
		return us / n
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	a[0], a[1] = f(per(q.requests)), f(per(q.requests)*q.burst)
	a[2], a[3] = f(per(q.tokens)), f(per(q.tokens)*q.tokBurst)
	a[4] = f(2 * us)
	return a
}

// verdict is what quotaScript answered.
type verdict struct {
	ok     bool
	wait   time.Duration
	byHold bool
}

// Take admits one attempt that declares cost tokens, waiting until by at
// the latest and never more than one Interval, as [ratelimit.Shared]
// asks. A negative cost counts as 0, and one above one Interval's token
// quota as that quota: no more can be spent in one Interval. It returns nil, a rejection matching ratelimit.ErrLimited (reason
// "rate", "throttled" or "redis_unavailable"), or ctx's error.
func (q *Quota) Take(ctx context.Context, cost int, by time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cost = q.capCost(cost)
	start := time.Now()
	maxWait := max(min(by.Sub(start), q.interval), 0)
	v, err := q.roundTrip(ctx, cost, maxWait, 0)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return q.onUnavailable(ctx, cost, by, err)
	}
	switch {
	case !v.ok && v.byHold:
		return q.reject(ctx, q.rejHold)
	case !v.ok:
		return q.reject(ctx, q.rejRate)
	}
	if err := q.sleep(ctx, time.Until(start.Add(v.wait))); err != nil {
		q.owe(-1, -int64(cost)) // the caller gave up: its units go back
		return err
	}
	return nil
}

// due returns ctx's error once ctx is done if its deadline has come: no
// attempt is admitted at its deadline, even if a round trip or a timer
// ended just then.
func due(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		<-ctx.Done() // its timer is due: let it end ctx
	}
	return ctx.Err()
}

// roundTrip runs quotaScript once with what the replica owes, which it
// keeps owing if Redis did not answer. maxWait < 0 admits nothing.
func (q *Quota) roundTrip(ctx context.Context, cost int, maxWait, hold time.Duration) (verdict, error) {
	req, tok, at := q.owedReq.Swap(0), q.owedTok.Swap(0), q.owedAt.Swap(0)
	hold = max(hold, time.Duration(q.holdUS.Swap(0))*time.Microsecond)
	now := time.Now()
	q.lastTrip.Store(now.UnixNano())
	span := int64(0)
	if at != 0 {
		span = min(now.Sub(time.Unix(0, at)), 2*q.interval).Microseconds()
	}
	var res []int64
	err := q.conn.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = quotaScript.Run(ctx, q.conn.client, q.keys,
			q.args[0], q.args[1], q.args[2], q.args[3], cost, int64(maxWait/time.Microsecond), req, tok,
			q.args[4], int64(hold/time.Microsecond), q.replica, quotaReplicaTTL.Milliseconds(), span).Int64Slice()
		return err
	})
	if err == nil && len(res) != 6 {
		err = errorf("quota script returned %v", res)
	}
	if err != nil {
		// Owed again: sent twice if Redis ran the script but its answer was
		// lost, which charges the fleet more, never less.
		q.oweSince(req, tok, at)
		q.noteHold(hold)
		return verdict{}, err
	}
	q.replicas.note(res[3], res[4] == 1, res[5])
	return verdict{ok: res[0] == 1, wait: time.Duration(res[1]) * time.Microsecond, byHold: res[2] == 1}, nil
}

// owe adds to what Redis has not counted, owed from now.
func (q *Quota) owe(req, tok int64) { q.oweSince(req, tok, time.Now().UnixNano()) }

// oweSince adds to what Redis has not counted, owed from at (Unix ns). The
// script keeps every bucket within its burst plus two Intervals of now,
// whatever is owed.
func (q *Quota) oweSince(req, tok, at int64) {
	if req == 0 && tok == 0 {
		return
	}
	for {
		old := q.owedAt.Load()
		if old != 0 && old <= at || q.owedAt.CompareAndSwap(old, at) {
			break
		}
	}
	q.owedReq.Add(req)
	q.owedTok.Add(tok)
}

// Settle settles an attempt Take admitted, which declared cost tokens and
// used used, as [ratelimit.Shared] asks: the difference is sent with the
// replica's next round trip, or within 200 ms if none comes. A used above
// the token quota of one Interval, or negative, is not believed: the
// attempt settles at cost.
func (q *Quota) Settle(cost, used int) {
	cost = q.capCost(cost)
	if used < 0 || float64(used) > q.tokens {
		used = cost
	}
	q.owe(0, int64(used)-int64(cost))
}

// capCost returns cost within 0 and one Interval's token quota, as Take
// charged it.
func (q *Quota) capCost(cost int) int {
	return int(min(float64(max(cost, 0)), math.Floor(q.tokens)))
}

// Hold asks every replica to hold its attempts for d from now, as
// [ratelimit.Shared] asks: the hold is sent to Redis at once, by a
// goroutine, and every replica's next attempt waits it out (or is
// rejected with reason "throttled" if it cannot). A d <= 0 is ignored; a
// d longer than two Intervals counts as two.
func (q *Quota) Hold(d time.Duration) {
	if d <= 0 {
		return
	}
	q.noteHold(min(d, 2*q.interval))
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// noteHold keeps the longer of d and the hold waiting to be sent.
func (q *Quota) noteHold(d time.Duration) {
	us := int64(d / time.Microsecond)
	for {
		old := q.holdUS.Load()
		if old >= us || q.holdUS.CompareAndSwap(old, us) {
			return
		}
	}
}

// flusher sends what is owed when no attempt has for flushEvery, and a
// hold at once. It ends with one last try when q is closed.
func (q *Quota) flusher() {
	defer close(q.flushed)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-q.done:
			q.flush(0)
			return
		case <-q.kick:
			q.flush(0)
		case <-t.C:
			q.flush(flushEvery)
		}
	}
}

// flush sends what is owed if no round trip began in the last idle.
func (q *Quota) flush(idle time.Duration) {
	if q.owedReq.Load() == 0 && q.owedTok.Load() == 0 && q.holdUS.Load() == 0 {
		return
	}
	if time.Since(time.Unix(0, q.lastTrip.Load())) < idle {
		return
	}
	q.roundTrip(context.Background(), 0, -1, 0)
}

// onUnavailable applies the fallback to an attempt Redis could not admit
// (cause is the round trip's error). What the fallback admits is owed to
// Redis, so that the shared buckets count it once Redis answers again.
func (q *Quota) onUnavailable(ctx context.Context, cost int, by time.Time, cause error) error {
	q.fallback.record(ctx)
	switch q.mode {
	case FailOpen:
		q.owe(1, int64(cost))
		return nil
	case FailClosed:
		return unavailable(q.reject(ctx, q.rejUnavailable), cause)
	}
	if err := q.localTake(ctx, cost, by); err != nil {
		return err
	}
	q.owe(1, int64(cost))
	return nil
}

// unavailable returns rej, wrapping cause if it is a server too old, so
// that it matches ErrRedisTooOld and names the version.
func unavailable(rej, cause error) error {
	var old *versionError
	if errors.As(cause, &old) {
		return fmt.Errorf("%w: %w", rej, old)
	}
	return rej
}

// localTake admits an attempt under this replica's share of the quota,
// waiting until by at the latest.
func (q *Quota) localTake(ctx context.Context, cost int, by time.Time) error {
	req, tok := q.local()
	now := time.Now()
	var rs []*rate.Reservation
	var wait time.Duration
	if req != nil {
		r := req.ReserveN(now, 1)
		rs, wait = append(rs, r), r.DelayFrom(now)
	}
	if tok != nil {
		r := tok.ReserveN(now, min(cost, tok.Burst()))
		rs, wait = append(rs, r), max(wait, r.DelayFrom(now))
	}
	giveBack := func() {
		for _, r := range rs {
			r.CancelAt(time.Now())
		}
	}
	if wait > 0 && now.Add(wait).After(by) {
		giveBack()
		return q.reject(ctx, q.rejRate)
	}
	if err := q.sleep(ctx, wait); err != nil {
		giveBack()
		return err
	}
	return nil
}

// local returns the limiters of this replica's share: the quota divided
// by QuotaConfig.Replicas or the live replicas Redis last reported.
func (q *Quota) local() (req, tok *rate.Limiter) {
	n := int64(q.share)
	if n == 0 {
		n = max(q.replicas.load(), 1)
	}
	q.localMu.Lock()
	defer q.localMu.Unlock()
	if n != q.localN {
		q.localN = n
		q.localReq = shareOf(q.localReq, q.requests, q.burst, n, q.interval)
		q.localTok = shareOf(q.localTok, q.tokens, q.tokBurst, n, q.interval)
	}
	return q.localReq, q.localTok
}

// shareOf returns lim (or a new limiter) set to 1/n of quota per interval,
// with 1/n of burst (at least 1); nil if quota is 0.
func shareOf(lim *rate.Limiter, quota, burst float64, n int64, interval time.Duration) *rate.Limiter {
	if quota == 0 {
		return nil
	}
	r := rate.Limit(quota / float64(n) / interval.Seconds())
	b := max(int(burst/float64(n)), 1)
	if lim == nil {
		return rate.NewLimiter(r, b)
	}
	now := time.Now()
	lim.SetLimitAt(now, r)
	lim.SetBurstAt(now, b)
	return lim
}

// sleep waits d or until ctx is done, counting the caller as waiting, and
// returns ctx's error if ctx is done or its deadline has come.
func (q *Quota) sleep(ctx context.Context, d time.Duration) error {
	if d > 0 {
		q.waiting.Add(1)
		defer q.waiting.Add(-1)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return due(ctx)
}

// reject records a rejection and calls OnReject.
func (q *Quota) reject(ctx context.Context, r *rejection) error {
	err := r.record(ctx)
	if q.onReject != nil {
		q.onReject(ctx, r.err)
	}
	return err
}

// Replica returns the identity of this replica in Redis.
func (q *Quota) Replica() string { return q.replica }

// Report returns the quota's state for a status page (see
// [statuspage.Reporter]): its settings, this replica's view, and whether
// Redis is reachable. It reads atomics only, and never asks Redis.
func (q *Quota) Report() statuspage.Report {
	replicas := "not reported"
	if n := q.replicas.load(); n > 0 {
		replicas = strconv.FormatInt(n, 10)
	}
	per := " / " + q.interval.String()
	f := []statuspage.Field{{Name: "replica", Value: q.replica}}
	if q.requests > 0 {
		f = append(f, statuspage.Field{Name: "requests", Value: fmtNum(q.requests) + per + " (burst " + fmtNum(q.burst) + ")"})
	}
	if q.tokens > 0 {
		f = append(f, statuspage.Field{Name: "tokens", Value: fmtNum(q.tokens) + per + " (burst " + fmtNum(q.tokBurst) + ")"})
	}
	f = append(f,
		statuspage.Field{Name: "waiting here", Value: strconv.FormatInt(q.waiting.Load(), 10)},
		statuspage.Field{Name: "tokens unsettled", Value: strconv.FormatInt(q.owedTok.Load(), 10)},
		statuspage.Field{Name: "live replicas", Value: replicas},
		statuspage.Field{Name: "fallback", Value: q.mode.String()})
	return statuspage.Report{Kind: KindQuota, Name: q.name, Fields: append(f, q.conn.reachability()...)}
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// Close stops the goroutine NewQuota started, after one last try to send
// what this replica owes, and releases the guard's gauge. It does not
// close Redis.Client. What is owed after Close is sent only by a later
// Take. It always returns nil and may be called more than once.
func (q *Quota) Close() error {
	q.closeOnce.Do(func() {
		close(q.done)
		<-q.flushed
		q.conn.close()
	})
	return nil
}
