package adaptive

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// The controller's constants; the package documentation explains most.
const (
	minSamples       = 10                    // latency samples that close a window, or an early probe
	probeSamples     = 128                   // latency samples that close a probe
	probeSpan        = time.Second           // or minSamples once it has lasted this
	minWindow        = 50 * time.Millisecond // a window lasts at least this, and 2 x noLoad
	probeConcurrency = 3                     // a probe's cap on the calls awaiting their answer
	maxProbeFailures = 20                    // failures that abandon a probe
	minProbeAge      = time.Second           // a probe is abandoned after max(this, 20 x latency) without progress
	probeAgeFactor   = 20
	quietSamples     = 16                        // a quiet window has at most this many samples
	clockSlack       = 10 * time.Second          // a reading this far behind the latest comes from another clock
	clockJump        = 10 * 365 * 24 * time.Hour // and so does one this far ahead
	fallSpan         = 2 * time.Second           // a fall of more than a third within this re-probes
	latencyFloor     = 10 * time.Microsecond
	slowFactor       = 3    // samples above slowFactor x noLoad are slow
	quietWeight      = 0.25 // how far a quiet window moves the no-load mean towards its own
	maxProbeBackoff  = 3    // unmeasured probes wait up to 2^this x ProbeInterval
	minGradient      = 0.5
	headroom         = 1.0
	smoothing        = 0.5
	hysteresis       = 0.75 // how far the estimate must move from the learned limit to change it

	// A cell packs a window's count (low countBits bits) and sum in µs
	// (above) into one word, so that a sample costs one atomic add. A
	// window closes early (closeEarly*) long before either part overflows.
	countBits       = 24
	countMask       = 1<<countBits - 1
	maxSampleUs     = 1<<32 - 1
	closeEarlyCount = 1 << 22
	closeEarlySumUs = 1 << 38
)

// stripes is the number of cells a window's samples are spread over.
const stripes = 8

// cell is one stripe of a window, alone on its cache line.
type cell struct {
	w atomic.Uint64
	_ [56]byte
}

// controller is the state of the limit's estimate, guarded by Limiter.mu.
// Times are in ns since Limiter.base.
type controller struct {
	min, max      float64
	tolerance     float64
	probeInterval int64
	probeLimit    int // probeConcurrency clamped to [min, max]

	limit       float64       // the estimate
	held        int           // the learned limit: limit rounded, with hysteresis
	noLoad      time.Duration // a probe's median
	base        time.Duration // the no-load mean
	cbase       time.Duration // the no-load mean of capped samples, which windows are compared with
	tail        bool          // a probe saw a slow sample: samples are capped at Limiter.capAt
	early       bool          // the probe in progress, or the last, was started by a fall
	measured    bool          // noLoad and base hold a measurement
	failedInRow int           // probes abandoned in a row while nothing was measured
	lastNow     int64         // the latest clock reading (see clock)

	// The probe in progress, if Limiter.probing.
	progressAt    int64 // when the probe last progressed: started, drained, or took a sample
	drainedAt     int64 // when at most probeLimit calls were awaiting their answer; -1: not yet
	before        int   // calls admitted before drainedAt still awaiting their answer
	closed        bool  // the probe has its samples and admits no one new
	samples       []time.Duration
	probeFailures int
	longest       time.Duration // longest latency seen during the probe
	recentSlow    time.Duration // the last window's slowest sample
	lastProbe     int64         // when noLoad was last measured or confirmed, or a probe abandoned
	probes        int           // probes started (for tests)
	quiet         int           // quiet windows that confirmed noLoad (for tests)

	openActive int     // calls awaiting their answer when the window opened
	little     float64 // the last window's latency by Little's law, in ns
	ceil       float64 // the lowest estimate at which an uncapped window at the limit read a gradient below 1

	// The estimates of the recent windows, for the fall that re-probes early.
	hist    [64]limitPoint // windows last >= 50 ms: 64 cover more than fallSpan
	histLen int
	histAt  int
}

type limitPoint struct {
	at    int64
	limit float64
}

func (c *controller) init(s settings) {
	c.min, c.max = float64(s.min), float64(s.max)
	c.tolerance = s.tolerance
	c.probeInterval = int64(s.probeInterval)
	c.probeLimit = min(max(probeConcurrency, s.min), s.max)
	// A closed probe still takes the samples of the calls it admitted.
	c.samples = make([]time.Duration, 0, probeSamples+c.probeLimit)
	c.limit = float64(s.initial)
	c.ceil = math.Inf(1)
	c.held = s.initial
}

// admission returns the learned limit: the estimate rounded, changed only
// once the estimate is hysteresis away, so that it does not flip every window.
func (c *controller) admission() int {
	if math.Abs(c.limit-float64(c.held)) >= hysteresis {
		c.held = int(math.Round(c.limit))
	}
	return c.held
}

// windowLen is the shortest a window lasts, in ns.
func (c *controller) windowLen() int64 { return int64(max(minWindow, 2*c.noLoad)) }

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

// since returns t on the controller's clock: ns since l.base, shifted.
func (l *Limiter) since(t time.Time) int64 { return int64(t.Sub(l.base)) + l.shift.Load() }

// clock returns t on the controller's clock, records it as ctl.lastNow, and
// reports whether it came from another clock than the previous readings.
// l.mu is held.
//
// Inside a testing/synctest bubble a Limiter reads the bubble's fake time.
// A reading more than clockSlack behind the latest, or more than clockJump
// ahead, comes from another clock: the controller's clock is shifted so
// that time continues from the latest reading.
func (l *Limiter) clock(t time.Time) (now int64, rebased bool) {
	c := &l.ctl
	now = l.since(t)
	if now < c.lastNow-int64(clockSlack) || now > c.lastNow+int64(clockJump) {
		l.shift.Add(c.lastNow - now)
		now = c.lastNow
		l.closeAt.Store(now + c.windowLen())
		l.openedAt.Store(now)
		rebased = true
	}
	c.lastNow = max(c.lastNow, now)
	return now, rebased
}

// observe takes one attempt's outcome, ended at end: a latency sample d,
// or a failure. Outside a probe it takes a lock only to close the window.
func (l *Limiter) observe(d time.Duration, failed bool, end time.Time) {
	if l.probing.Load() {
		l.observeProbe(d, failed, end)
		return
	}
	if failed {
		l.failures.Add(1)
		return
	}
	// A slow sample sets the stall age of the next probe: after a drift to
	// a slow dependency, its answers arrive only that late.
	if c := l.slowAbove.Load(); c > 0 && int64(d) > c {
		raise(&l.slowest, int64(d))
	}
	ds := d
	if c := time.Duration(l.capAt.Load()); c > 0 && ds > c {
		l.excess.Add(int64((ds - c) / time.Microsecond))
		ds = c
	}
	// The clock's lowest bits pick the cell, so concurrent samples seldom
	// write the same word.
	w := l.cells[(uint64(d)+uint64(end.Nanosecond()))%stripes].w.Add(packSample(ds))
	// The slots' count sits on the cache line every admission writes: a
	// busy window reads it for one sample in 8 per cell.
	if n := w & countMask; n < quietSamples || n%8 == 0 {
		raise(&l.peak, int64(l.slots.Active()))
	}
	// A reading well before the window opened comes from another clock,
	// which closeWindow rebases.
	if now := l.since(end); now >= l.closeAt.Load() || now < l.openedAt.Load()-int64(clockSlack) || overfull(w) {
		l.closeWindow(end)
	}
}

// raise sets v to x if x is larger.
func raise(v *atomic.Int64, x int64) {
	for p := v.Load(); x > p && !v.CompareAndSwap(p, x); p = v.Load() {
	}
}

// packSample is d as a window increment: d in µs above a count of 1.
func packSample(d time.Duration) uint64 {
	us := (d + time.Microsecond/2) / time.Microsecond
	us = min(max(us, 0), maxSampleUs)
	return uint64(us)<<countBits | 1
}

func overfull(w uint64) bool {
	return w&countMask >= closeEarlyCount || w>>countBits >= closeEarlySumUs
}

// closeWindow closes the window, unless another goroutine holds the lock
// or it is not yet due, and updates the limit from it.
func (l *Limiter) closeWindow(end time.Time) {
	if !l.mu.TryLock() {
		return
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
	c := &l.ctl
	failures := l.failures.Swap(0)
	c.recentSlow = time.Duration(l.slowest.Swap(0))
	peak := l.peak.Swap(0)
	l.closeAt.Store(now + c.windowLen())
	opened, active := l.openedAt.Load(), l.awaiting()
	l.openedAt.Store(now)
	// Little's law: the mean of the calls awaiting their answer at the
	// window's ends, over the rate at which calls ended.
	inflight := float64(c.openActive+active) / 2
	c.openActive = active
	c.little = inflight * float64(max(now-opened, 1)) / float64(max(int64(count)+failures, 1))
	l.update(now, count, sumUs, uint64(l.excess.Swap(0)), failures, peak)
}

// update moves the limit after a window of count latency samples summing
// sumUs µs (capped), failures and peak slots held, or starts a probe.
// l.mu is held.
func (l *Limiter) update(now int64, count, sumUs, excessUs uint64, failures, peak int64) {
	c := &l.ctl
	// A window that did not reach the limit ran below it: it does not lower
	// the limit, and starts no periodic probe.
	reached := peak >= int64(c.held)
	// A quiet window ran as a probe does: few samples, with at most
	// probeLimit in flight. Every sample read the slots, so peak is exact.
	quiet := count <= quietSamples && peak <= int64(c.probeLimit) && !reached &&
		2*failures <= int64(count)+failures
	if c.measured && quiet {
		// It moves the no-load mean, and within Tolerance of it confirms it,
		// postponing the periodic probe.
		mean := float64(sumUs) / float64(count)
		base := max(c.cbase, latencyFloor).Seconds() * 1e6
		if mean <= c.tolerance*base && mean >= base/c.tolerance {
			c.lastProbe = now
			c.quiet++
		}
		c.cbase = time.Duration((base + quietWeight*(mean-base)) * 1e3)
		if !c.tail {
			c.base = c.cbase
		}
	}
	interval := max(c.probeInterval, 20*c.windowLen())
	if !c.measured {
		interval <<= min(c.failedInRow, maxProbeBackoff)
	}
	if reached && now-c.lastProbe >= interval {
		c.early, c.ceil = false, math.Inf(1)
		l.startProbe(now)
		return
	}
	if !c.measured || quiet {
		return // no base yet, or no queueing this limiter caused
	}
	// The gradient applies to the limit admission enforced, not to the
	// estimate: applied to the estimate, an equilibrium such as 7.25 cycles.
	target := c.gradient(count, sumUs, excessUs, reached)*float64(c.held) + headroom
	target = min(target, max(c.limit, float64(2*peak+1)))
	if !reached {
		target = max(target, c.limit)
	}
	if 2*failures > int64(count)+failures {
		target = min(target, c.limit)
	}
	c.limit = min(max(c.limit+smoothing*(target-c.limit), c.min), c.max)
	// Limit never reads above what admission enforces, nor below it while
	// calls are admitted: raise it before admission, lower it after.
	n := int64(c.admission())
	if n > l.learned.Load() {
		l.learned.Store(n)
	}
	l.setAdmission(int(n))
	l.learned.Store(n)
	c.remember(now)
	if c.fell(now) {
		c.early = true
		l.startProbe(now)
	}
}

// gradient returns the gradient of a window of count latency samples
// summing sumUs µs as capped and excessUs µs above the cap. It exceeds 1
// only while the calls in flight do not pile up: Little's latency within
// Tolerance of the samples' uncapped mean. Without a cap, it exceeds 1 only
// below the lowest estimate that read congestion, until the next probe.
// l.mu is held.
func (c *controller) gradient(count, sumUs, excessUs uint64, reached bool) float64 {
	avg := max(float64(sumUs)/float64(count), float64(latencyFloor/time.Microsecond))
	base := max(c.cbase, latencyFloor).Seconds() * 1e6
	uncapped := (float64(sumUs) + float64(excessUs)) * 1e3 / float64(count) // ns
	top := 1.0
	if c.little <= c.tolerance*uncapped && (c.tail || c.limit < c.ceil) {
		top = c.tolerance
	}
	gradient := min(max(c.tolerance*base/avg, minGradient), top)
	if gradient < 1 && reached && !c.tail {
		c.ceil = min(c.ceil, c.limit)
	}
	return gradient
}

// setAdmission sets the admission limit to n. l.mu is held.
func (l *Limiter) setAdmission(n int) {
	if cur := l.slots.Limit(); n < cur {
		l.drops.Add(1)
	} else if n == cur {
		return
	}
	l.slots.SetLimit(n)
}

// startProbe caps the calls awaiting their answer at probeLimit until the
// probe has its samples, then admits no one new until the calls it admitted
// have answered. l.mu is held.
func (l *Limiter) startProbe(now int64) {
	c := &l.ctl
	c.progressAt = now
	c.probes++
	// The stall age starts from the last window's slowest sample: after a
	// drift to a slower dependency, the probe's calls answer only that late.
	c.samples, c.probeFailures, c.longest = c.samples[:0], 0, c.recentSlow
	c.drainedAt, c.closed = -1, false
	l.publishStale() // before probing is set: probeCheck reads it then
	// probing is set before the answered calls are counted: a change that
	// this count misses sees probing set, and sets the cap again.
	l.probing.Store(true)
	l.setAdmission(l.probeAdmission())
	if a := l.awaiting(); a <= c.probeLimit {
		c.drain(now, a)
	}
}

// drain records that the calls admitted before the probe have drained to
// awaiting: the calls admitted from now on are the probe's.
func (c *controller) drain(now int64, awaiting int) {
	c.drainedAt, c.progressAt, c.before = now, now, awaiting
}

// probeAdmission is the admission limit during a probe: probeLimit calls
// awaiting their answer (none once the probe has closed) beside the
// answered ones, at least 1 and at most the learned limit. l.mu is held.
func (l *Limiter) probeAdmission() int {
	awaiting := l.ctl.probeLimit
	if l.ctl.closed {
		awaiting = 0
	}
	return max(1, min(l.ctl.held, awaiting+l.answered()))
}

// awaiting returns the number of calls in flight that await their answer.
func (l *Limiter) awaiting() int { return max(l.slots.Active()-l.answered(), 0) }

// answered returns the number of calls in flight that have their answer.
func (l *Limiter) answered() int { return int(max(l.answers.Load(), 0)) }

// countAnswer counts the calls in flight whose answer has arrived. During
// a probe it moves the admission limit with them, so that the cap counts
// only the calls awaiting their answer.
func (l *Limiter) countAnswer(delta int) {
	l.answers.Add(int64(delta))
	if !l.probing.Load() {
		return
	}
	l.mu.Lock()
	if l.probing.Load() {
		l.setAdmission(l.probeAdmission())
	}
	l.mu.Unlock()
}

// stallAge is how long a probe may go without progress, in ns.
func (c *controller) stallAge() int64 {
	return int64(max(minProbeAge, probeAgeFactor*max(c.noLoad, c.longest)))
}

// stallLimit is how long the probe may go without progress with active
// calls in flight, in ns. Before the first measurement the latency is
// unknown and may be long: calls in flight get at least ProbeInterval.
// Afterwards calls held past stallAge (hung calls, streams) are no
// no-load samples, and would otherwise keep the cap.
func (c *controller) stallLimit(active int) int64 {
	if c.measured || active == 0 {
		return c.stallAge()
	}
	return max(c.stallAge(), c.probeInterval)
}

// publishStale publishes when the probe may be stale, for probeCheck's
// reading without the lock. l.mu is held; it is called whenever
// progressAt, the stall age or measured moves.
func (l *Limiter) publishStale() {
	c := &l.ctl
	l.staleAt.Store(c.progressAt + c.stallLimit(0))
	l.staleBusyAt.Store(c.progressAt + c.stallLimit(1))
}

// probeCheck runs before an admission during a probe. Nothing runs in the
// background, so an admission must find a probe that traffic has left,
// which would otherwise cap a later burst at 3. While the probe is live, an
// admission that finds the lock taken goes on. Once it may be stale, it
// waits for the lock: the holder may be abandoning the probe, and a call
// admitted meanwhile would meet the stale cap and be rejected.
func (l *Limiter) probeCheck() {
	if !l.mu.TryLock() {
		now := l.since(time.Now())
		if now <= l.staleAt.Load() {
			return
		}
		if now <= l.staleBusyAt.Load() && l.slots.Active() > 0 {
			return
		}
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	l.checkProbe()
}

// checkProbe abandons the probe running, if any, if it is stale, finishes
// it if it is closed and its calls have answered (or stalled), and
// restarts it if the clock changed. l.mu is held.
func (l *Limiter) checkProbe() {
	if !l.probing.Load() {
		return
	}
	c := &l.ctl
	now, rebased := l.clock(time.Now())
	switch {
	case rebased:
		l.restartProbe(now)
	case c.closed:
		if l.awaiting() <= c.before || now-c.progressAt > c.stallAge() {
			l.finishProbe(now)
		}
	case now-c.progressAt > c.stallLimit(l.slots.Active()):
		l.endProbe(now)
	}
}

// observeProbe takes one attempt's outcome during a probe.
func (l *Limiter) observeProbe(d time.Duration, failed bool, end time.Time) {
	// This call is counted unless its answer was marked.
	active := l.slots.Active()
	awaiting := max(active-l.answered(), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	now, rebased := l.clock(end)
	if !l.probing.Load() {
		return // the probe ended meanwhile
	}
	c := &l.ctl
	// The sample's own latency extends the stall age before the check: a
	// slow dependency's first answer is progress.
	if !failed {
		c.longest = max(c.longest, d)
	}
	if rebased {
		l.restartProbe(now)
		return
	}
	if !c.closed && now-c.progressAt > c.stallLimit(active-1) {
		l.endProbe(now)
		return
	}
	if c.drainedAt >= 0 && now-int64(d) < c.drainedAt {
		// Admitted before the drain: no sample, one fewer call to wait for.
		c.before = max(c.before-1, 0)
	} else if !l.probeSample(now, d, failed, awaiting) {
		return // abandoned
	}
	// A closed probe ends once no call it admitted awaits its answer, or
	// once those left have stalled: a hung call is no no-load sample.
	if c.closed && (awaiting-1 <= c.before || now-c.progressAt > c.stallAge()) {
		l.finishProbe(now)
		return
	}
	l.publishStale()
}

// probeSample takes the outcome of a call admitted after the probe
// drained, and reports false if the probe was abandoned. awaiting counts
// this call unless its answer was marked. l.mu is held.
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
		// Every call admitted since the drain is a sample, slow ones too.
		c.samples = append(c.samples, d)
		c.progressAt = now
		if n := len(c.samples); n >= probeSamples || n >= minSamples && (c.early || now-c.drainedAt >= int64(probeSpan)) {
			c.closed = true
			l.setAdmission(l.probeAdmission())
		}
	}
	return true
}

// finishProbe ends the probe measured. l.mu is held.
func (l *Limiter) finishProbe(now int64) {
	c := &l.ctl
	slow := c.measure()
	l.slowAbove.Store(int64(slow))
	if !c.tail {
		slow = 0
	}
	l.capAt.Store(int64(slow))
	l.endProbe(now)
}

// restartProbe ends a probe begun on another clock and starts a fresh one,
// without backoff. l.mu is held.
func (l *Limiter) restartProbe(now int64) {
	l.endProbe(now)
	if !l.ctl.measured {
		l.ctl.failedInRow--
	}
	l.startProbe(now)
}

// measure sets noLoad, base and cbase from the probe's samples, and returns
// slowFactor x noLoad. The gradient compares a window's mean with cbase, a
// mean: a heavy tail would make the mean read as congestion against a
// median. A probe that sees a sample above slowFactor x noLoad sets tail,
// and samples are then capped there, here and in the windows. An early
// probe's 10 samples are too few to lift the cap.
func (c *controller) measure() time.Duration {
	s := c.samples
	slices.Sort(s)
	n := len(s)
	c.noLoad = (s[(n-1)/2] + s[n/2]) / 2
	slow := time.Duration(slowFactor * max(c.noLoad, latencyFloor))
	c.tail = s[n-1] > slow || c.early && c.tail
	var sum, csum time.Duration
	for _, x := range s {
		sum += x
		if c.tail {
			x = min(x, slow)
		}
		csum += x
	}
	c.base, c.cbase = sum/time.Duration(n), csum/time.Duration(n)
	c.measured = true
	c.failedInRow = 0
	return slow
}

// endProbe ends the probe, measured or abandoned, restores the admission
// limit and opens a fresh window. l.mu is held.
func (l *Limiter) endProbe(now int64) {
	c := &l.ctl
	c.lastProbe = now
	if !c.measured {
		c.failedInRow++
	}
	c.histLen, c.histAt = 0, 0
	c.openActive = l.awaiting()
	c.remember(now)
	for i := range l.cells {
		l.cells[i].w.Store(0)
	}
	l.excess.Store(0)
	l.failures.Store(0)
	l.peak.Store(0)
	l.closeAt.Store(now + c.windowLen())
	l.openedAt.Store(now)
	l.setAdmission(c.held)
	l.probing.Store(false)
}
