package redisstate

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/statuspage"
)

var _ statuspage.Reporter = (*SharedBreaker)(nil)

// SharedBreaker is a circuit breaker whose open state is shared by the
// replicas that use the same Name and Redis. Every call goes through a
// local [breaker.Breaker], which decides alone: a call costs no round trip
// to Redis.
//
// When the local breaker trips, a background goroutine reports it to
// Redis. Once Quorum replicas have tripped within Window, the breaker is
// open everywhere for OpenTimeout. The replicas learn it by pub/sub, or by
// polling if a message was missed. Each holds its local breaker open for
// the time that remains, on its own clock. Then one replica at a time, the
// holder of a probe lease, sends the half-open probes. Its verdict closes
// the breaker everywhere or opens it again. The others reject meanwhile
// with reason "half_open_full". A replica asks for the lease at its next
// poll after a call wanted to probe, and renews it only while calls want
// to or its probe runs.
//
// While Redis cannot be asked, each replica runs on its local breaker
// alone: a trip opens it locally, and it probes for itself. From its first
// poll that Redis answers again, each replica follows the shared state. If
// that is closed, a hold the replica still had for a shared open period
// ends. If it is open, the replica holds for the time that remains. A trip
// of the replica's own while Redis could not be asked is reported then, if
// it still stands.
//
// The breaker's channel ({watertight:breaker:<Name>}:events) and keys
// belong to its replicas: Redis ACLs should keep other clients out. A
// replica applies any well-formed message at once, as it cannot tell who
// published it. It holds an open for no longer than its own OpenTimeout.
// Its next poll that Redis answers undoes an open or a close that the
// shared state does not have.
//
// [SharedBreaker.Report] shows the local breaker's state on a status
// page, and whether Redis is reachable.
//
// Build one with [NewSharedBreaker] and stop it with
// [SharedBreaker.Close]; the zero value is not usable. A SharedBreaker is
// safe for concurrent use by multiple goroutines.
type SharedBreaker struct {
	br       *breaker.Breaker
	name     string
	conn     *conn
	replica  string
	keys     []string // state, trips, probe
	channel  string
	window   string // ms
	quorum   string
	openMS   string
	graceMS  string
	leaseMS  string
	poll     time.Duration
	maxOpen  time.Duration // the longest open applied: the local OpenTimeout
	fallback *fallbackRecord

	// active: the local breaker is held by shared open period gen, rather
	// than by its own trip; prober: this replica holds gen's probe lease.
	// held: the local breaker is still in the hold applied for gen, which
	// a failed round trip does not end (it clears active, so that the
	// replica probes for itself); the local breaker's own trip or probe
	// outcome does, and so does the shared state once Redis answers.
	active atomic.Bool
	held   atomic.Bool
	prober atomic.Bool
	gen    atomic.Int64
	// wanted: a call asked the gate since the last poll; probes: calls
	// admitted while the local breaker was held for a shared open period
	// (probes, then) and not yet ended. The probe lease is taken and
	// renewed only while one of them holds, and given back otherwise, so
	// that a replica without calls does not keep the others from probing.
	wanted atomic.Bool
	probes atomic.Int64

	applyMu sync.Mutex // serialises applying the shared state
	events  chan report
	stop    chan struct{}
	wg      sync.WaitGroup
	pubsub  *redis.PubSub
	once    sync.Once
}

// report is a change of the local breaker to tell Redis about.
type report struct {
	verdict bool  // a prober's verdict; else a trip
	ok      bool  // the verdict: closed
	gen     int64 // the open period judged
}

// NewSharedBreaker returns a SharedBreaker configured by cfg, or an error
// naming the first invalid field. It subscribes to the breaker's channel
// and starts polling in the background; it does not wait for Redis, and
// works on its local breaker until Redis answers.
func NewSharedBreaker(cfg BreakerConfig) (*SharedBreaker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c, err := newConn(cfg.Redis, KindSharedBreaker, cfg.Breaker.Name, cfg.Breaker.MeterProvider)
	if err != nil {
		return nil, err
	}
	open := cfg.Breaker.OpenTimeout
	if open == 0 {
		open = breaker.DefaultOpenTimeout
	}
	quorum, window, poll, lease := cfg.Quorum, cfg.Window, cfg.PollInterval, cfg.ProbeLease
	if quorum == 0 {
		quorum = DefaultQuorum
	}
	if window == 0 {
		window = DefaultTripWindow
	}
	if poll == 0 {
		poll = DefaultPollInterval
	}
	if lease == 0 {
		lease = DefaultProbeLease
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
	prefix := keyPrefix("breaker", cfg.Breaker.Name)
	s := &SharedBreaker{
		conn:    c,
		name:    cfg.Breaker.Name,
		replica: cfg.Replica,
		keys:    []string{prefix + "state", prefix + "trips", prefix + "probe"},
		channel: prefix + "events",
		window:  ms(window),
		quorum:  strconv.Itoa(quorum),
		openMS:  ms(open),
		// An open period left without a verdict (every replica gone)
		// lapses into closed this long after it ended.
		graceMS:  ms(open + 2*lease),
		leaseMS:  ms(lease),
		poll:     poll,
		maxOpen:  open,
		fallback: newFallbackRecord(meterOf(cfg.Breaker.MeterProvider), KindSharedBreaker, cfg.Breaker.Name, "local"),
		events:   make(chan report, 64),
		stop:     make(chan struct{}),
	}
	if s.replica == "" {
		s.replica = newReplicaID()
	}
	bc := cfg.Breaker
	user := bc.OnStateChange
	bc.OnStateChange = func(from, to breaker.State) {
		if user != nil {
			user(from, to)
		}
		s.onStateChange(from, to)
	}
	if isFailure := bc.IsFailure; isFailure != nil {
		// A panic in fn is a failure whatever IsFailure says, as in
		// breaker.Execute. (DefaultIsFailure counts errPanicked already.)
		bc.IsFailure = func(err error) bool { return err == errPanicked || isFailure(err) }
	}
	s.br, err = breaker.New(bc)
	if err != nil {
		c.close()
		return nil, errorf("Config.%w", trimPrefix(err))
	}
	s.br.GateProbes(s.gate)
	s.wg.Add(1)
	go s.work()
	if !cfg.NoSubscribe {
		s.pubsub = c.client.Subscribe(context.Background(), s.channel)
		s.wg.Add(1)
		go s.listen()
	}
	return s, nil
}

// trimPrefix strips "breaker: Config." from a breaker config error so that
// it reads "redisstate: Config.Breaker.X ...".
func trimPrefix(err error) error {
	return errString("Breaker." + strings.TrimPrefix(err.Error(), "breaker: Config."))
}

type errString string

func (e errString) Error() string { return string(e) }

// errPanicked is the outcome reported to the local breaker when fn panics
// or calls runtime.Goexit. The breaker counts it as a failure. Its outcome
// rules (breaker/outcome.go) exclude nil, a rejection (policy.ErrRejected),
// context.Canceled and, by default, policy.ErrThrottled: errPanicked
// matches none of them. Then Config.IsFailure decides: DefaultIsFailure
// returns true for it, and NewSharedBreaker wraps any other IsFailure to
// return true for it.
var errPanicked = errors.New("redisstate: fn panicked or called runtime.Goexit")

// Execute runs fn through the local breaker: see [breaker.Breaker.Execute].
// A call admitted while the local breaker is held for a shared open period
// is a probe of it. If fn panics or calls runtime.Goexit, the call counts
// as a failure and the panic goes on. But if ctx had ended first, not by a
// Deadline's timer, the call is excluded, as any outcome then is. Execute
// never waits for Redis. It panics if ctx or fn is nil.
func (s *SharedBreaker) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("redisstate: nil Context")
	}
	if fn == nil {
		panic("redisstate: nil fn")
	}
	p, err := s.br.Allow(ctx)
	if err != nil {
		return err
	}
	// Closed and not held for a shared period (the steady state): one
	// atomic load more than the local breaker alone.
	if s.active.Load() {
		s.probes.Add(1)
		defer s.probes.Add(-1) // after the outcome is reported
	}
	// A panic or runtime.Goexit in fn is reported as a failure from a
	// deferred call that recovers nothing, so that a half-open breaker is
	// never left waiting for a probe's outcome.
	finished := false
	defer func() {
		if !finished {
			p.Done(errPanicked)
		}
	}()
	err = fn(ctx)
	finished = true
	return p.Done(err)
}

// Breaker returns the local breaker, for its State and Counts. Calling its
// ForceOpen, Reset, OpenUntil or GateProbes interferes with the sharing.
func (s *SharedBreaker) Breaker() *breaker.Breaker { return s.br }

// State returns the local breaker's state.
func (s *SharedBreaker) State() breaker.State { return s.br.State() }

// Replica returns the identity of this replica in Redis.
func (s *SharedBreaker) Replica() string { return s.replica }

// Report returns the breaker's state for a status page (see
// [statuspage.Reporter]): the local breaker's state, read without side
// effects (see [breaker.Breaker.Snapshot]), and whether Redis is
// reachable. It never asks Redis.
func (s *SharedBreaker) Report() statuspage.Report {
	snap := s.br.Snapshot()
	state := snap.State.String()
	if snap.Forced {
		state += " (forced)"
	}
	f := []statuspage.Field{
		{Name: "replica", Value: s.replica},
		{Name: "state", Value: state, Alert: snap.State == breaker.Open},
	}
	if !snap.Until.IsZero() {
		f = append(f, statuspage.Field{Name: "open until", Value: snap.Until.Format("15:04:05.000")})
	}
	return statuspage.Report{Kind: KindSharedBreaker, Name: s.name, Fields: append(f, s.conn.reachability()...)}
}

// gate lets a half-open local breaker probe if this replica holds the
// probe lease of the shared open period, or if the open period is its own
// (a trip below the quorum, or while Redis cannot be asked).
func (s *SharedBreaker) gate(context.Context) bool {
	if !s.active.Load() {
		return true
	}
	s.wanted.Store(true)
	return s.prober.Load()
}

// onStateChange queues the local breaker's trips and verdicts for the
// worker. It runs on the goroutine that delivers the change (usually a
// caller's): it never blocks and never talks to Redis.
func (s *SharedBreaker) onStateChange(from, to breaker.State) {
	if !s.active.Load() && to != breaker.HalfOpen {
		// The local breaker decided alone (a trip, or the outcome of its
		// own probe): it is no longer in the hold of a shared period.
		s.held.Store(false)
	}
	var r report
	switch {
	case from == breaker.HalfOpen && s.active.Load() && s.prober.Load() && (to == breaker.Open || to == breaker.Closed):
		r = report{verdict: true, ok: to == breaker.Closed, gen: s.gen.Load()}
	case to == breaker.Open && !s.active.Load():
		r = report{}
	default:
		return
	}
	select {
	case s.events <- r:
	default: // full: the next poll converges
	}
}

// listen applies the messages of the breaker's channel.
func (s *SharedBreaker) listen() {
	defer s.wg.Done()
	ch := s.pubsub.Channel()
	for {
		select {
		case <-s.stop:
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			s.onMessage(m.Payload)
		}
	}
}

// onMessage applies "open <gen> <ms>" or "closed <gen>"; anything else
// (a message some other client published on the channel) is ignored.
func (s *SharedBreaker) onMessage(p string) {
	open, gen, remaining, ok := parseMessage(p)
	switch {
	case !ok:
	case open:
		s.applyOpen(gen, remaining)
	default:
		s.applyClosed(gen)
	}
}

// maxOpenMS bounds the remaining time a message may carry (a year), so
// that a forged one cannot overflow a time.Duration.
const maxOpenMS = 365 * 24 * 3600 * 1000

// parseMessage parses a message of the breaker's channel.
func parseMessage(p string) (open bool, gen int64, remaining time.Duration, ok bool) {
	f := strings.Fields(p)
	if len(f) < 2 {
		return false, 0, 0, false
	}
	gen, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || gen <= 0 || gen > maxGen {
		return false, 0, 0, false
	}
	switch {
	case f[0] == "open" && len(f) == 3:
		ms, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || ms < -maxOpenMS || ms > maxOpenMS {
			return false, 0, 0, false
		}
		return true, gen, time.Duration(ms) * time.Millisecond, true
	case f[0] == "closed" && len(f) == 2:
		return false, gen, 0, true
	}
	return false, 0, 0, false
}

// applyOpen holds the local breaker for open period gen, remaining from
// now (<= 0: half-open) but no longer than the local OpenTimeout, unless
// it already is.
func (s *SharedBreaker) applyOpen(gen int64, remaining time.Duration) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.active.Load() && s.gen.Load() == gen {
		return
	}
	s.prober.Store(false)
	s.gen.Store(gen)
	s.held.Store(true)
	s.active.Store(true) // before OpenUntil: its change is not a trip to report
	s.br.OpenUntil(time.Now().Add(min(remaining, s.maxOpen)))
}

// applyClosed closes the local breaker if it is held for open period gen,
// also when a failed round trip has let it probe for itself since.
func (s *SharedBreaker) applyClosed(gen int64) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.gen.Load() != gen || !s.active.Load() && !s.held.Load() {
		return
	}
	s.active.Store(false)
	s.held.Store(false)
	s.prober.Store(false)
	s.br.Reset()
}

// work reports the local breaker's changes and polls the shared state.
func (s *SharedBreaker) work() {
	defer s.wg.Done()
	t := time.NewTicker(s.poll)
	defer t.Stop()
	// A report that got no answer is sent again at each poll until one
	// does, as long as it still stands: the newest trip or verdict only.
	var pending *report
	send := func(r report) {
		var err error
		if r.verdict {
			err = s.sendVerdict(r)
		} else if s.br.State() != breaker.Closed { // the trip still stands
			err = s.sendTrip()
		}
		if err != nil {
			pending = &r
		} else {
			pending = nil
		}
	}
	for {
		select {
		case <-s.stop:
			return
		case r := <-s.events:
			send(r)
		case <-t.C:
			if pending != nil {
				send(*pending)
			}
			s.pollOnce()
		}
	}
}

// run runs one script through the guard and returns its two numbers.
func (s *SharedBreaker) run(sc *redis.Script, args ...any) (int64, int64, error) {
	var res []int64
	err := s.conn.do(context.Background(), func(ctx context.Context) error {
		var err error
		res, err = sc.Run(ctx, s.conn.client, s.keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		s.unreachable()
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, errorf("script returned %v", res)
	}
	return res[0], res[1], nil
}

// unreachable falls back to the local breaker alone: a half-open period
// held for a shared open is now probed by this replica itself.
func (s *SharedBreaker) unreachable() {
	s.fallback.record(context.Background())
	s.applyMu.Lock()
	s.active.Store(false)
	s.prober.Store(false)
	s.applyMu.Unlock()
}

// maxGen bounds the identities of open periods: Redis's Lua reads numbers
// as doubles, exact up to 2^53.
const maxGen = 1<<53 - 1

// newGen draws the identity of an open period this replica may open.
func newGen() string { return strconv.FormatInt(rand.Int64N(maxGen)+1, 10) }

// tripArgs returns tripScript's arguments.
func (s *SharedBreaker) tripArgs() []any {
	return []any{s.replica, s.window, s.quorum, s.openMS, s.graceMS, s.channel, newGen()}
}

// sendTrip reports a trip of the local breaker.
func (s *SharedBreaker) sendTrip() error {
	gen, rem, err := s.run(tripScript, s.tripArgs()...)
	if err == nil && gen > 0 {
		s.applyOpen(gen, time.Duration(rem)*time.Millisecond)
	}
	return err
}

// sendVerdict reports a prober's verdict.
func (s *SharedBreaker) sendVerdict(r report) error {
	ok := "0"
	if r.ok {
		ok = "1"
	}
	gen, rem, err := s.run(verdictScript, s.replica, strconv.FormatInt(r.gen, 10), ok, s.openMS, s.graceMS, s.channel, newGen())
	switch {
	case err != nil:
		return err
	case gen < 0:
	case gen == 0:
		s.applyClosed(r.gen)
	default:
		s.applyOpen(gen, time.Duration(rem)*time.Millisecond)
	}
	return nil
}

// pollOnce reads the shared state, applies it if it differs from what this
// replica holds, and takes or renews the probe lease of a half-open period.
func (s *SharedBreaker) pollOnce() {
	gen, rem, err := s.run(pollScript)
	if err != nil {
		return
	}
	if gen == 0 {
		if s.active.Load() || s.held.Load() {
			s.applyClosed(s.gen.Load())
		}
		return
	}
	s.applyOpen(gen, time.Duration(rem)*time.Millisecond)
	if rem > 0 {
		return
	}
	if !s.wanted.Swap(false) && s.probes.Load() == 0 {
		// No call wants to probe here: give back a lease this replica
		// holds, so that a replica with calls probes.
		if s.prober.Swap(false) {
			s.runOne(dropProbeScript, s.replica)
		}
		return
	}
	got, err := s.runOne(probeScript, s.replica, strconv.FormatInt(gen, 10), s.leaseMS)
	if err == nil {
		s.applyMu.Lock()
		if s.active.Load() && s.gen.Load() == gen {
			s.prober.Store(got == 1)
		}
		s.applyMu.Unlock()
	}
}

// runOne runs a script that returns one number through the guard.
func (s *SharedBreaker) runOne(sc *redis.Script, args ...any) (int64, error) {
	var n int64
	err := s.conn.do(context.Background(), func(ctx context.Context) error {
		var err error
		n, err = sc.Run(ctx, s.conn.client, s.keys, args...).Int64()
		return err
	})
	if err != nil {
		s.unreachable()
	}
	return n, err
}

// Close stops the background goroutines, closes the subscription and
// unregisters the local breaker's gauge. It does not close Redis.Client.
// The SharedBreaker goes on working as a local breaker. It always returns
// nil and may be called more than once.
func (s *SharedBreaker) Close() error {
	s.once.Do(func() {
		close(s.stop)
		if s.pubsub != nil {
			s.pubsub.Close()
		}
		s.wg.Wait()
		// Nothing will apply the shared state any more: give back a probe
		// lease this replica holds, unless its probe is still running
		// (one prober at a time: the lease then lapses after ProbeLease),
		// so that another replica probes now; and let the local breaker
		// decide alone. Left active, the gate would refuse every probe
		// for good.
		if s.prober.Load() && s.probes.Load() == 0 {
			s.runOne(dropProbeScript, s.replica)
		}
		s.applyMu.Lock()
		s.active.Store(false)
		s.held.Store(false)
		s.prober.Store(false)
		s.applyMu.Unlock()
		s.br.Close()
		s.conn.close()
	})
	return nil
}
