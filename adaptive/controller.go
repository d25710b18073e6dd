package adaptive

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// The controller's constants; the package documentation explains them.
const (
	minSamples       = 10                    // latency samples that close a window, and an early probe's admissions
	probeSamples     = 128                   // latency samples that close a probe's admissions
	probeSpan        = time.Second           // or minSamples once it has lasted this
	minWindow        = 50 * time.Millisecond // a window lasts at least this, and 2 x the no-load latency
	probeConcurrency = 3                     // admission cap while the no-load latency is measured
	maxProbeFailures = 20                    // failures that abandon a probe
	minProbeAge      = time.Second           // a probe is abandoned after max(this, 20 x the latency) without progress
	probeAgeFactor   = 20
	quietSamples     = 16                        // a window of at most this many samples, all with at most probeLimit in flight, is quiet
	clockSlack       = 10 * time.Second          // a clock reading this far behind the latest comes from another clock
	clockJump        = 10 * 365 * 24 * time.Hour // and so does one this far ahead
	fallSpan         = 2 * time.Second           // a fall of more than a third within this re-probes
	latencyFloor     = 10 * time.Microsecond
	slowFactor       = 3    // a sample this many times noLoad is remembered for a probe's stall age
	quietWeight      = 0.25 // how far a quiet window moves the no-load mean towards its own
	maxProbeBackoff  = 3    // unmeasured probes abandoned in a row space the next by up to 2^this x ProbeInterval
	minGradient      = 0.5
	headroom         = 1.0
	smoothing        = 0.5
	hysteresis       = 0.75 // how far the estimate must move from the admitted limit to change it

	// A cell's sum and count share one atomic word, so that a sample costs
	// one atomic add: the count in the low countBits bits, the sum of the
	// latencies in µs above. A window closes early long before either part
	// could overflow (closeEarly*), and one sample counts at most
	// maxSampleUs (71 minutes).
	countBits       = 24
	countMask       = 1<<countBits - 1
	maxSampleUs     = 1<<32 - 1
	closeEarlyCount = 1 << 22
	closeEarlySumUs = 1 << 38
)

// stripes is the number of cells a window's samples are spread over.
const stripes = 8

// cell is one stripe of a window: a packed sum and count, alone on its
// cache line.
type cell struct {
	w atomic.Uint64
	_ [56]byte
}

// controller is the state of the limit's estimate. It is guarded by
// Limiter.mu.
type controller struct {
	min, max      float64
	tolerance     float64
	probeInterval int64 // ns
	probeLimit    int   // probeConcurrency clamped to [min, max]

	limit       float64       // the estimate
	held        int           // the learned limit: limit rounded, with hysteresis
	noLoad      time.Duration // the no-load latency (a probe's median), once measured
	base        time.Duration // the no-load mean
	cbase       time.Duration // the no-load mean of capped samples, which a window's mean is compared with
	capAt       time.Duration // samples are capped at this in windows, or 0
	tail        bool          // a probe saw a sample above slowFactor x noLoad (see measure)
	early       bool          // the probe in progress, or the last, was started by a fall
	measured    bool          // noLoad and base hold a measurement
	failedInRow int           // probes abandoned in a row while nothing was measured

	// lastNow is the latest clock reading taken under Limiter.mu, in ns
	// since base (see clock).
	lastNow int64

	// The probe in progress, if Limiter.probing.
	progressAt    int64 // when the probe last progressed: started, drained, or took a sample
	drainedAt     int64 // when at most probeLimit calls were seen in flight; -1: not yet
	before        int   // calls admitted before drainedAt still awaiting their answer
	closed        bool  // the probe has its minSamples and admits no one new
	samples       []time.Duration
	probeFailures int
	longest       time.Duration // longest latency seen during the probe
	recentSlow    time.Duration // the last window's slowest sample above sampleCap, or 0
	lastProbe     int64         // when noLoad was last measured or confirmed, or a probe abandoned
	probes        int           // probes started (for tests)
	quiet         int           // quiet windows that confirmed noLoad (for tests)

	openActive int     // calls awaiting their answer when the window opened
	little     float64 // the last window's Little's latency, in ns
	ceil       float64 // the lowest estimate at which an uncapped window that reached the limit read a gradient below 1, or +Inf

	// The limits of the recent windows, for the fall that re-probes early.
	hist    [64]limitPoint // windows last >= 50 ms: 64 cover more than fallSpan
	histLen int
	histAt  int
}

type limitPoint struct {
	at    int64 // ns since base
	limit float64
}

func (c *controller) init(s settings) {
	c.min, c.max = float64(s.min), float64(s.max)
	c.tolerance = s.tolerance
	c.probeInterval = int64(s.probeInterval)
	c.probeLimit = min(max(probeConcurrency, s.min), s.max)
	// A probe closes on its probeSamples-th sample at most, with at most
	// probeLimit calls awaiting their answer: those are its last samples.
	c.samples = make([]time.Duration, 0, probeSamples+c.probeLimit)
	c.limit = float64(s.initial)
	c.ceil = math.Inf(1)
	c.held = s.initial
}

// admission returns the learned limit that admission enforces outside a
// probe: the estimate rounded, with hysteresis. An estimate that hovers
// around n + 0.5 would otherwise flip the limit between n and n + 1 every
// window; the limit changes only once the estimate is 0.75 away from it.
func (c *controller) admission() int {
	if math.Abs(c.limit-float64(c.held)) >= hysteresis {
		c.held = int(math.Round(c.limit))
	}
	return c.held
}

// windowLen is the shortest a window lasts, in ns.
func (c *controller) windowLen() int64 { return int64(max(minWindow, 2*c.noLoad)) }

// littleLatency returns the mean latency by Little's law of a window of
// span ns in which ended calls ended, active slots held at its end, and
// records active as the next window's opening.
func (c *controller) littleLatency(span, ended int64, active int) float64 {
	inflight := float64(c.openActive+active) / 2
	c.openActive = active
	return inflight * float64(max(span, 1)) / float64(max(ended, 1))
}

func (c *controller) remember(now int64) {
	c.hist[c.histAt] = limitPoint{now, c.limit}
	c.histAt = (c.histAt + 1) % len(c.hist)
	c.histLen = min(c.histLen+1, len(c.hist))
}

// fell reports whether the estimate fell by more than a third from its
// highest within the last fallSpan.
func (c *controller) fell(now int64) bool {
	high := c.limit
	for _, p := range c.hist[:c.histLen] {
		if now-p.at <= int64(fallSpan) && p.limit > high {
			high = p.limit
		}
	}
	return high-c.limit > high/3
}

// since returns t on the controller's clock: ns since l.base, plus the
// shift that clock adds when the readings jump back.
func (l *Limiter) since(t time.Time) int64 { return int64(t.Sub(l.base)) + l.shift.Load() }

// clock returns t on the controller's clock, as since does, records it as
// ctl.lastNow, and reports whether the reading came from another clock
// than the previous ones. l.mu is held.
//
// Monotonic readings never jump, but a Limiter can see readings of two
// clocks: built outside a testing/synctest bubble and used inside one (or
// in one bubble, then another, or back outside), it reads the bubble's
// fake time, which starts in the year 2000. A reading more than clockSlack
// behind the latest one (goroutines that read the clock moments apart and
// take the lock in the other order are well within it), or more than
// clockJump (10 years) ahead, comes from another clock: the controller's
// clock is shifted so that time continues from the latest reading. Its
// windows then close on time, and the shift stays bounded however often
// the clocks alternate.
func (l *Limiter) clock(t time.Time) (now int64, rebased bool) {
	c := &l.ctl
	now = l.since(t)
	if now < c.lastNow-int64(clockSlack) || now > c.lastNow+int64(clockJump) {
		l.shift.Add(c.lastNow - now)
		now = c.lastNow
		// The window's start moved with the clock: let samples of the new
		// clock close it on time.
		l.closeAt.Store(now + c.windowLen())
		l.openedAt.Store(now)
		rebased = true
	}
	c.lastNow = max(c.lastNow, now)
	return now, rebased
}

// observe takes one attempt's outcome: a latency sample d (a success or a
// timeout), or a failure. end is when the attempt ended, or zero if the
// caller did not read the clock. It is the hot path: while no probe runs, a
// sample costs an atomic add and a few loads, and takes a lock only when it
// closes the window (about once per 50 ms).
func (l *Limiter) observe(d time.Duration, failed bool, end time.Time) {
	if l.probing.Load() {
		l.observeProbe(d, failed, end)
		return
	}
	if failed {
		l.failures.Add(1)
		return
	}
	// A sample past 3 x noLoad (rare outside congestion) is remembered,
	// for the stall age of a probe that follows: after a drift to a slow
	// dependency its answers arrive only after that long.
	if c := time.Duration(l.slowAbove.Load()); c > 0 && d > c {
		for s := l.slowest.Load(); int64(d) > s && !l.slowest.CompareAndSwap(s, int64(d)); s = l.slowest.Load() {
		}
	}
	// The lowest bits (ns) of the clock, or of the latency when the caller
	// did not pass the clock, pick the cell: as good as random, and free.
	// Two goroutines then seldom add to the same word, which on a busy
	// limiter would bounce between the cores.
	ds := d
	if c := time.Duration(l.capAt.Load()); c > 0 && ds > c {
		l.excess.Add(int64((ds - c) / time.Microsecond))
		ds = c
	}
	w := l.cells[(uint64(d)+uint64(end.Nanosecond()))%stripes].w.Add(packSample(ds))
	n := w & countMask
	// Slots held now, this call's included: the window's peak tells
	// whether the limit is used at all. The count sits on the cache line
	// every admission writes, so a busy window reads it for one sample in
	// 8 per cell only.
	if n < 16 || n%8 == 0 {
		if a := int64(l.slots.Active()); a > l.peak.Load() {
			l.raisePeak(a)
		}
	}
	if end.IsZero() {
		// Observe: the caller did not pass the clock. Read it for every
		// sample of a quiet window, one in 4 of a busy one.
		if n >= 4 && n%4 != 0 && !overfull(w) {
			return
		}
		end = time.Now()
	}
	// A reading before the window opened, by more than the slack of
	// goroutines' reads, comes from another clock: closeWindow's clock
	// rebases it.
	if now := l.since(end); now >= l.closeAt.Load() || now < l.openedAt.Load()-int64(clockSlack) || overfull(w) {
		l.closeWindow(end)
	}
}

func (l *Limiter) raisePeak(a int64) {
	for p := l.peak.Load(); a > p; p = l.peak.Load() {
		if l.peak.CompareAndSwap(p, a) {
			return
		}
	}
}

// packSample is d as a window increment: d in µs (rounded) above a count of 1.
func packSample(d time.Duration) uint64 {
	us := (d + time.Microsecond/2) / time.Microsecond
	us = min(max(us, 0), maxSampleUs)
	return uint64(us)<<countBits | 1
}

func overfull(w uint64) bool {
	return w&countMask >= closeEarlyCount || w>>countBits >= closeEarlySumUs
}

// closeWindow closes the window, if no other goroutine is closing it and it
// is still due, and updates the limit from it.
func (l *Limiter) closeWindow(end time.Time) {
	if !l.mu.TryLock() {
		return // another sample is closing it, or a probe step runs
	}
	defer l.mu.Unlock()
	now, _ := l.clock(end)
	if l.probing.Load() {
		return
	}
	var count, sumUs uint64
	full := false
	for i := range l.cells {
		w := l.cells[i].w.Load()
		count += w & countMask
		full = full || overfull(w)
	}
	if count < minSamples || (now < l.closeAt.Load() && !full) {
		return
	}
	count = 0
	for i := range l.cells {
		w := l.cells[i].w.Swap(0)
		count += w & countMask
		sumUs += w >> countBits
	}
	failures := l.failures.Swap(0)
	l.ctl.recentSlow = time.Duration(l.slowest.Swap(0))
	peak := l.peak.Swap(0)
	l.closeAt.Store(now + l.ctl.windowLen())
	opened, active := l.openedAt.Load(), l.awaiting()
	l.openedAt.Store(now)
	l.ctl.little = l.ctl.littleLatency(now-opened, int64(count)+failures, active)
	l.update(now, count, sumUs, uint64(l.excess.Swap(0)), failures, peak)
}

// update moves the limit after a window of count latency samples summing
// sumUs µs, failures and peak slots held, or starts a probe. l.mu is held.
func (l *Limiter) update(now int64, count, sumUs, excessUs uint64, failures, peak int64) {
	c := &l.ctl
	// The window reached the limit if one of its calls saw every slot
	// held. One that did not ran below the limit: its latency is that of
	// fewer calls than the limit, so it does not lower the limit (below),
	// and it starts no periodic probe, since the no-load latency matters
	// only to windows that reach the limit.
	//
	// A quiet window ran as a probe does, without capping anything: all
	// its calls with at most probeLimit in flight, below the limit. With
	// at most quietSamples samples every sample read the slots in flight
	// (see observe), so peak is exact: the most calls in flight at once.
	// Its mean moves the no-load mean a quarter of the way towards it (a
	// mean follows the one slow call of a window, hence the smoothing), and
	// if it agrees with the no-load mean (within Tolerance either way) it
	// confirms it: the periodic probe is postponed, so that a burst that
	// reaches the limit after low traffic meets the learned limit, not a
	// probe's cap.
	reached := peak >= int64(c.held)
	quiet := count <= quietSamples && peak <= int64(c.probeLimit) && !reached &&
		2*failures <= int64(count)+failures
	if c.measured && quiet {
		mean := float64(sumUs) / float64(count)
		base := max(c.cbase, latencyFloor).Seconds() * 1e6
		if mean <= c.tolerance*base && mean >= base/c.tolerance {
			c.lastProbe = now
			c.quiet++
		}
		c.cbase = time.Duration((base + quietWeight*(mean-base)) * 1e3)
		if c.capAt == 0 {
			c.base = c.cbase
		}
	}
	// A ProbeInterval shorter than a few windows would leave no window to
	// adjust in between: the probes are spaced at least 20 windows apart.
	// While nothing could be measured (calls that hang, streams held
	// longer than a probe lasts), each abandoned probe doubles the wait
	// for the next, up to 8 x ProbeInterval: the limit meanwhile stays at
	// InitialLimit, a static bulkhead, rather than at a probe's cap.
	interval := max(c.probeInterval, 20*c.windowLen())
	if !c.measured {
		interval <<= min(c.failedInRow, maxProbeBackoff)
	}
	if reached && now-c.lastProbe >= interval {
		c.early, c.ceil = false, math.Inf(1)
		l.startProbe(now)
		return
	}
	if !c.measured {
		return // there is no base to compare with yet
	}
	if quiet {
		// At most 3 in flight, below the limit: no queueing this limiter
		// caused, so whatever its latency says, it is no reason to lower
		// the limit (nor, unused, to raise it). A slower dependency is the
		// next probe's to measure.
		return
	}
	gradient := c.gradient(count, sumUs, excessUs, reached)
	// The window's latency is that of the limit admission enforced, the
	// learned one: the gradient applies to it, not to the estimate, which
	// may lie up to the hysteresis away. (Applied to the estimate, an
	// equilibrium between two integers, such as 7.25, becomes a cycle: at
	// 7 the estimate climbs to the next integer, at 8 it falls back.)
	target := gradient*float64(c.held) + headroom
	// No growth while the limit is not used: the cap never lowers it.
	target = min(target, max(c.limit, float64(2*peak+1)))
	if !reached {
		// Nor a fall: slow calls (a tail, hung calls) in a window whose
		// calls never filled the limit say nothing of the limit.
		target = max(target, c.limit)
	}
	if 2*failures > int64(count)+failures {
		target = min(target, c.limit)
	}
	c.limit = min(max(c.limit+smoothing*(target-c.limit), c.min), c.max)
	// Limit never reads above what admission enforces, nor below it while
	// calls are admitted: raise the learned limit before admission, lower
	// it after.
	n := c.admission()
	if int64(n) > l.learned.Load() {
		l.learned.Store(int64(n))
		l.setAdmission(n)
	} else {
		l.setAdmission(n)
		l.learned.Store(int64(n))
	}
	c.remember(now)
	if c.fell(now) {
		c.early = true
		l.startProbe(now)
	}
}

// gradient returns the gradient of a window of count latency samples
// summing sumUs µs as capped, excessUs µs above the cap, that reached the
// limit or not. The gradient rises above 1 (the limit grows by more than
// the headroom) only while the calls in flight do not pile up: Little's
// latency (the calls awaiting their answer over the rate at which they
// end) within Tolerance of the mean of the window's samples, uncapped. A
// window's samples are the calls that ended in it, which after a rise of
// the limit are the fast ones; Little's latency also counts the slow calls
// still in flight. Without a cap, the congestion a window found (a
// gradient below 1 at the limit) is approached again one call at a time,
// until the next periodic probe. l.mu is held.
func (c *controller) gradient(count, sumUs, excessUs uint64, reached bool) float64 {
	avg := max(float64(sumUs)/float64(count), float64(latencyFloor/time.Microsecond))
	base := max(c.cbase, latencyFloor).Seconds() * 1e6
	uncapped := (float64(sumUs) + float64(excessUs)) * 1e3 / float64(count) // ns
	top := 1.0
	if c.little <= c.tolerance*uncapped && (c.capAt > 0 || c.limit < c.ceil) {
		top = c.tolerance
	}
	gradient := min(max(c.tolerance*base/avg, minGradient), top)
	if gradient < 1 && reached && c.capAt == 0 {
		c.ceil = min(c.ceil, c.limit)
	}
	return gradient
}

// setAdmission sets the admission limit to n. l.mu is held (or l is being
// built).
func (l *Limiter) setAdmission(n int) {
	cur := l.slots.Limit()
	if n == cur {
		return
	}
	if n < cur {
		l.drops.Add(1)
	}
	l.slots.SetLimit(n)
}

// startProbe caps the calls awaiting their answer at probeLimit until
// probeSamples latencies of calls that started with at most probeLimit
// awaiting have been seen (minSamples once it has lasted probeSpan, or for
// an early probe), then admits no one new until the calls it admitted have
// answered, to measure the no-load latency. l.mu is held.
func (l *Limiter) startProbe(now int64) {
	c := &l.ctl
	c.progressAt = now
	c.probes++
	// The stall age starts from the slowest answer of the last window: after
	// a drift to a slower dependency (1.5 s where noLoad was 20 ms) the
	// probe's calls answer only after that long, and are not stalled.
	c.samples, c.probeFailures, c.longest = c.samples[:0], 0, c.recentSlow
	c.drainedAt, c.closed = -1, false
	l.publishStale() // before probing is set: probeCheck reads it then
	c.admission()    // settles held, which the probe's cap never exceeds
	// probing is set before the answered calls are counted (in
	// probeAdmission): a change of the count that this reading misses
	// sees probing set, and sets the cap again (answersChanged).
	l.probing.Store(true)
	l.setAdmission(l.probeAdmission())
	if a := l.awaiting(); a <= c.probeLimit {
		c.drain(now, a)
	}
}

// drain records that the calls admitted before the probe have drained to
// awaiting (at most probeLimit) awaiting their answer: the calls admitted
// from now on are the probe's.
func (c *controller) drain(now int64, awaiting int) {
	c.drainedAt, c.progressAt, c.before = now, now, awaiting
}

// probeAdmission is the admission limit during a probe: probeLimit calls
// awaiting their answer beside the answered ones still in flight (streams
// whose headers arrived, through httppolicy), and never more than the
// learned limit; once the probe has closed, none awaiting beyond those
// in flight (at least 1, the least limit there is). l.mu is held.
func (l *Limiter) probeAdmission() int {
	awaiting := l.ctl.probeLimit
	if l.ctl.closed {
		awaiting = 0
	}
	return max(1, min(l.ctl.held, awaiting+l.answered()))
}

// awaiting returns the number of calls in flight that await their answer:
// those whose answer no Transport has marked.
func (l *Limiter) awaiting() int {
	return max(l.slots.Active()-l.answered(), 0)
}

// answersChanged is told each change of the answered calls in flight
// (l.answers): during a probe it moves the admission limit with them, so
// that the cap counts only the calls awaiting their answer. Outside a
// probe it costs one atomic load.
func (l *Limiter) answersChanged() {
	if !l.probing.Load() {
		return
	}
	l.mu.Lock()
	if l.probing.Load() {
		l.setAdmission(l.probeAdmission())
	}
	l.mu.Unlock()
}

// stallAge is how long a probe may go without progress before it is
// abandoned, in ns.
func (c *controller) stallAge() int64 {
	return int64(max(minProbeAge, probeAgeFactor*max(c.noLoad, c.longest)))
}

// publishStale publishes when the probe may be found stale, for
// probeCheck's reading without the lock, as stallLimit computes it: with
// no call in flight (staleAt, progressAt + stallAge) and with calls in
// flight (staleBusyAt, later before the first measurement). l.mu is held;
// it is called whenever progressAt, the stall age or measured moves, so
// that while the lock is free the published times are never later than
// the ones a check under the lock compares with.
func (l *Limiter) publishStale() {
	c := &l.ctl
	l.staleAt.Store(c.progressAt + c.stallLimit(0))
	l.staleBusyAt.Store(c.progressAt + c.stallLimit(1))
}

// probeCheck runs before an admission during a probe: it abandons the
// probe if it has made no progress for stallLimit, or if the clock changed
// (see clock). Samples alone cannot end a probe that traffic has left: one
// started as the calls stopped would cap admission at 3 through any idle
// period, and the next burst would meet the cap. With calls in flight their
// samples, or their failures, decide (observeProbe): their latency, unknown
// yet, may be longer than a second. Nothing runs in the background: the
// next admission finds the probe stale.
//
// While the probe is live, an admission that finds the lock taken (by a
// sample, a window or another admission's check) goes on without the
// check. Once the probe may be stale (published by publishStale) it waits
// for the lock instead: the holder may be abandoning the probe, and an
// admission that went on would meet the stale cap before the holder lifts
// it. A burst after an idle spell that left a probe behind met it so: its
// calls arrive together, one of them takes the lock to abandon the probe,
// and those that found the lock taken were admitted against the cap of 3
// and rejected, 12 of 15 at worst, while Limit read 20
// (TestOneHungCallThenBursts, TestIdleProbeIsAbandoned, about 1 run in
// 100). Before the first measurement they also filled the cap before the
// holder counted the calls in flight, which then gave the probe
// ProbeInterval (stallLimit) and kept it. Only the calls that arrive at a
// probe that may be stale wait, the first of them abandons it or finds it
// live, and each holds the lock for a clock reading.
//
// "May be stale" mirrors stallLimit: before the first measurement a probe
// with calls in flight is given ProbeInterval, not stallAge, and calls that
// arrive then go on without waiting (staleBusyAt). Waiting from stallAge on
// made every rejection during such a probe queue for the lock: 64 callers
// rejected at the cap, 3 calls hung, saw a p99 of 0.7 ms against 1 us. The
// count of calls in flight is read before the wait is decided, as the check
// under the lock reads it: a burst whose calls all wait finds none of its own
// in flight, so the first probe left by an idle spell is still abandoned
// before any of them is admitted.
func (l *Limiter) probeCheck() {
	if !l.mu.TryLock() {
		now := l.since(time.Now())
		if now <= l.staleAt.Load() {
			return // live: a sample or another admission is at it
		}
		if now <= l.staleBusyAt.Load() && l.slots.Active() > 0 {
			return // live while calls are in flight (see stallLimit)
		}
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	l.checkProbe()
}

// checkProbe is probeCheck's check, l.mu held: it abandons the probe
// running, if any, if it is stale, ends it measured if it is closed and
// its calls have answered (or stalled), and restarts it if the clock
// changed.
func (l *Limiter) checkProbe() {
	if !l.probing.Load() {
		return
	}
	c := &l.ctl
	now, rebased := l.clock(time.Now())
	if rebased {
		l.restartProbe(now)
		return
	}
	if c.closed {
		if l.awaiting() <= c.before || now-c.progressAt > c.stallAge() {
			l.finishProbe(now)
		}
		return
	}
	if now-c.progressAt > c.stallLimit(l.slots.Active()) {
		l.endProbe(now)
	}
}

// stallLimit is how long the probe may go without progress, in ns, with
// active calls in flight. Once noLoad is known it is stallAge whatever is
// in flight: calls held longer than 20 x noLoad (hung calls, long streams)
// are no no-load samples, and would otherwise keep the cap of 3 for as
// long as they are held. Before the first measurement the latency is
// unknown and may be long (an LLM's answer): calls in flight are given
// max(stallAge, ProbeInterval) to report, answered streams included,
// whose samples come when their bodies end.
func (c *controller) stallLimit(active int) int64 {
	if c.measured || active == 0 {
		return c.stallAge()
	}
	return max(c.stallAge(), c.probeInterval)
}

// observeProbe takes one attempt's outcome during a probe.
func (l *Limiter) observeProbe(d time.Duration, failed bool, end time.Time) {
	if end.IsZero() {
		end = time.Now()
	}
	// The calls in flight, and those awaiting their answer, this one's
	// included unless its answer was marked (through httppolicy: it is a
	// stream's headers).
	active := l.slots.Active()
	awaiting := max(active-l.answered(), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	now, rebased := l.clock(end)
	if !l.probing.Load() {
		return // the probe ended meanwhile; this sample is dropped
	}
	c := &l.ctl
	// Abandoned after stallLimit without progress (not since the probe
	// began), unless closed: a probe at low traffic, or of streamed answers
	// whose slots are held long after the sampled answer, progresses slowly
	// but surely, and ends measured. Checked before this sample counts, which
	// would otherwise revive a probe that has long been stale, but after
	// the sample's own latency extends the stall age: a slow dependency's
	// first answer arrives after that latency, and is progress. A probe
	// begun on another clock (a testing/synctest bubble that ended, say)
	// starts again on this one.
	if !failed {
		c.longest = max(c.longest, d)
	}
	if rebased {
		l.restartProbe(now)
		return
	}
	if !c.closed && now-c.progressAt > c.stallLimit(active-1) {
		l.endProbe(now) // abandoned: the dependency barely answers
		return
	}
	if c.drainedAt >= 0 && now-int64(d) < c.drainedAt {
		// Admitted before the drain: no sample of the probe's, but one
		// fewer such call to wait for once it closes.
		c.before = max(c.before-1, 0)
	} else if !l.probeSample(now, d, failed, awaiting) {
		return // abandoned
	}
	// A closed probe ends measured once no call it admitted awaits its
	// answer (this one is ending), or once those left have stalled: a
	// call that hangs is no no-load sample.
	if c.closed && (awaiting-1 <= c.before || now-c.progressAt > c.stallAge()) {
		l.finishProbe(now)
		return
	}
	l.publishStale() // progressAt or longest may have moved
}

// probeSample takes the outcome of a call that was not admitted before
// the probe drained, and reports false if the probe was abandoned.
// awaiting counts the calls awaiting their answer, this one's included
// unless its answer was marked. l.mu is held.
func (l *Limiter) probeSample(now int64, d time.Duration, failed bool, awaiting int) bool {
	c := &l.ctl
	switch {
	case failed:
		c.probeFailures++
		if c.probeFailures >= maxProbeFailures && !c.closed {
			l.endProbe(now)
			return false
		}
	case c.drainedAt < 0:
		if awaiting <= c.probeLimit {
			c.drain(now, max(awaiting-1, 0))
		}
	case awaiting <= c.probeLimit && len(c.samples) < cap(c.samples):
		// Every call admitted since the drain is the probe's, whatever its
		// latency: the probe takes them in the order they started, not in
		// the order they answer, in which the fast calls come first.
		c.samples = append(c.samples, d)
		c.progressAt = now
		if n := len(c.samples); n >= probeSamples || n >= minSamples && (c.early || now-c.drainedAt >= int64(probeSpan)) {
			// Closed: no one new is admitted, so that the calls admitted
			// so far, the slow ones too, are the probe's samples.
			c.closed = true
			l.setAdmission(l.probeAdmission())
		}
	}
	return true
}

// finishProbe ends the probe measured. l.mu is held.
func (l *Limiter) finishProbe(now int64) {
	c := &l.ctl
	c.measure()
	l.slowAbove.Store(int64(slowFactor * max(c.noLoad, latencyFloor)))
	l.capAt.Store(int64(c.capAt))
	l.endProbe(now)
}

// restartProbe ends a probe begun on another clock (see clock), whose
// times mean nothing on this one, and starts a fresh one: it was not
// abandoned for the dependency's sake, so it adds no backoff. l.mu is held.
func (l *Limiter) restartProbe(now int64) {
	l.endProbe(now)
	if !l.ctl.measured {
		l.ctl.failedInRow--
	}
	l.startProbe(now)
}

// measure sets noLoad, base and the cap of samples from the probe's
// samples: of every call it admitted after the drain, whatever its
// latency, less those still held when it stalled. The gradient compares a
// window's mean with cbase, a mean, not the median: a dependency whose
// answers have a heavy tail (one in ten taking ten times the others) has a
// mean twice its median at any load, which against the median would read
// as congestion and drive the limit towards 1 / (1 - gradient), about 3.
// Congestion that shows as a tail (a LIFO server, timeouts) still moves
// the mean, at full weight, unless a probe saw a tail at no load: a sample
// above slowFactor x noLoad. Such a tail is the dependency's own, and the
// few slow calls a window happens to hold would move its mean far from
// cbase, so samples are then capped at slowFactor x noLoad, here and in
// the windows. A probe that sees no tail lifts the cap, unless it is
// early: its 10 samples are too few to tell.
func (c *controller) measure() {
	s := c.samples
	slices.Sort(s)
	n := len(s)
	c.noLoad = (s[(n-1)/2] + s[n/2]) / 2
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	c.base = sum / time.Duration(n)
	capAt := time.Duration(slowFactor * max(c.noLoad, latencyFloor))
	c.tail = s[n-1] > capAt || c.early && c.tail
	if !c.tail {
		capAt = 0
	}
	c.capAt = capAt
	sum = 0
	for _, x := range s {
		if capAt > 0 {
			x = min(x, capAt)
		}
		sum += x
	}
	c.cbase = sum / time.Duration(n)
	c.measured = true
	c.failedInRow = 0
}

// endProbe ends the probe (measured or abandoned), restores the admission
// limit and opens a fresh window. l.mu is held.
func (l *Limiter) endProbe(now int64) {
	c := &l.ctl
	c.lastProbe = now
	if !c.measured {
		c.failedInRow++ // abandoned, and nothing measured yet: back off
	}
	c.histLen, c.histAt = 0, 0
	c.openActive = l.awaiting()
	l.excess.Store(0)
	c.remember(now)
	for i := range l.cells {
		l.cells[i].w.Store(0)
	}
	l.failures.Store(0)
	l.peak.Store(0)
	l.closeAt.Store(now + c.windowLen())
	l.openedAt.Store(now)
	l.setAdmission(c.admission())
	l.probing.Store(false)
}

// answered returns the number of calls in flight that have their answer.
func (l *Limiter) answered() int { return int(max(l.answers.Load(), 0)) }
