package adaptive

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

const (
	minSamples       = 10                    // latency samples that close a window, or an early probe
	probeSamples     = 128                   // latency samples that close a probe
	probeSpan        = time.Second           // or minSamples once it has lasted this
	minWindow        = 50 * time.Millisecond // a window lasts at least this, and 2 x noLoad
	probeConcurrency = 3                     // a probe's cap on the calls awaiting their answer
	maxProbeFailures = 20                    // failures that abandon a probe
	minProbeAge      = time.Second           // a probe is abandoned after max(this, 20 x latency) without progress
	probeAgeFactor   = 20
	quietSamples     = 16              // a quiet window has at most this many samples
	fallSpan         = 2 * time.Second // a fall of more than a third within this re-probes
	latencyFloor     = 10 * time.Microsecond
	slowFactor       = 3    // samples above slowFactor x noLoad are slow
	quietWeight      = 0.25 // how far a quiet window moves the no-load mean towards its own
	maxProbeBackoff  = 3    // unmeasured probes wait up to 2^this x ProbeInterval
	minGradient      = 0.5
	headroom         = 1.0
	smoothing        = 0.5
	hysteresis       = 0.75 // how far the estimate must move from the learned limit to change it

	// The window packs its count (low countBits bits) and sum in µs (above)
	// into one word. It closes early long before either part overflows.
	countBits       = 24
	countMask       = 1<<countBits - 1
	maxSampleUs     = 1<<32 - 1
	closeEarlyCount = 1 << 22
	closeEarlySumUs = 1 << 38
)

// controller is the state of the limit's estimate, guarded by Limiter.mu.
// Times are in ns since Limiter.base.
type controller struct {
	cfg        Config // resolved
	probeLimit int    // probeConcurrency clamped to [MinLimit, MaxLimit]

	limit       float64       // the estimate
	held        int           // the learned limit: limit rounded, with hysteresis
	noLoad      time.Duration // a probe's median
	base        time.Duration // the no-load mean
	cbase       time.Duration // the no-load mean of capped samples, which windows are compared with
	tail        bool          // a probe saw a slow sample: samples are capped at Limiter.capAt
	early       bool          // the probe in progress, or the last, was started by a fall
	measured    bool          // noLoad and base hold a measurement
	failedInRow int           // probes abandoned in a row while nothing was measured

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

	hist []limitPoint // the estimates of the windows within fallSpan
}

type limitPoint struct {
	at    int64
	limit float64
}

func (c *controller) init(s Config) {
	c.cfg = s
	c.probeLimit = min(max(probeConcurrency, s.MinLimit), s.MaxLimit)
	c.samples = make([]time.Duration, 0, probeSamples+c.probeLimit) // a closed probe's calls too
	c.limit = float64(s.InitialLimit)
	c.ceil = math.Inf(1)
	c.held = s.InitialLimit
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

// remember records the estimate at now, and reports whether it fell by
// more than a third from its highest within fallSpan.
func (c *controller) remember(now int64) (fell bool) {
	c.hist = slices.DeleteFunc(c.hist, func(p limitPoint) bool { return now-p.at > int64(fallSpan) })
	c.hist = append(c.hist, limitPoint{now, c.limit})
	high := c.limit
	for _, p := range c.hist {
		high = max(high, p.limit)
	}
	return high-c.limit > high/3
}

// since returns t on the controller's clock: ns since l.base.
func (l *Limiter) since(t time.Time) int64 { return int64(t.Sub(l.base)) }

// observe takes one attempt's outcome: a latency sample d, or a failure,
// of a call to which closed slots were reserved for higher priorities.
func (l *Limiter) observe(d time.Duration, failed bool, end time.Time, closed int) {
	if l.probing.Load() {
		l.observeProbe(d, failed, end)
		return
	}
	if failed {
		l.failures.Add(1)
		return
	}
	// A slow sample sets the next probe's stall age.
	if c := l.slowAbove.Load(); c > 0 && int64(d) > c {
		raise(&l.slowest, int64(d))
	}
	ds := d
	if c := time.Duration(l.capAt.Load()); c > 0 && ds > c {
		l.excess.Add(int64((ds - c) / time.Microsecond))
		ds = c
	}
	w := l.window.Add(packSample(ds))
	// Every admission writes the slots' count: read it for few samples.
	if n := w & countMask; n <= quietSamples || n%8 == 0 {
		a := int64(l.slots.Active())
		raise(&l.peak, a)
		raise(&l.reach, a+int64(closed))
	}
	if l.since(end) >= l.closeAt.Load() || overfull(w) {
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
	us := min(max((d+time.Microsecond/2)/time.Microsecond, 0), maxSampleUs)
	return uint64(us)<<countBits | 1
}

func overfull(w uint64) bool {
	return w&countMask >= closeEarlyCount || w>>countBits >= closeEarlySumUs
}

// closeWindow closes the window if it is due and the lock is free.
func (l *Limiter) closeWindow(end time.Time) {
	if !l.mu.TryLock() {
		return
	}
	defer l.mu.Unlock()
	now := l.since(end)
	if l.probing.Load() {
		return
	}
	if w := l.window.Load(); w&countMask < minSamples || (now < l.closeAt.Load() && !overfull(w)) {
		return
	}
	w := l.window.Swap(0)
	count, sumUs := w&countMask, w>>countBits
	c := &l.ctl
	failures := l.failures.Swap(0)
	c.recentSlow = time.Duration(l.slowest.Swap(0))
	peak, reach := l.peak.Swap(0), l.reach.Swap(0)
	l.closeAt.Store(now + c.windowLen())
	opened, active := l.openedAt.Load(), l.awaiting()
	l.openedAt.Store(now)
	// Little's law: calls awaiting their answer over the rate they ended.
	inflight := float64(c.openActive+active) / 2
	c.openActive = active
	c.little = inflight * float64(max(now-opened, 1)) / float64(max(int64(count)+failures, 1))
	l.update(now, count, sumUs, uint64(l.excess.Swap(0)), failures, peak, reach)
}

// update moves the limit after a window, or starts a probe. peak is the
// most calls in flight a sample saw; reach, the most plus the slots
// reserved above the sample's priority. l.mu is held.
func (l *Limiter) update(now int64, count, sumUs, excessUs uint64, failures, peak, reach int64) {
	c := &l.ctl
	// A call below a reserve reaches the limit at its own ceiling.
	reached := reach >= int64(c.held)
	// A quiet window ran as a probe does. Every sample read the slots.
	quiet := count <= quietSamples && peak <= int64(c.probeLimit) && !reached &&
		failures <= int64(count)
	if c.measured && quiet {
		// Within Tolerance, it confirms the no-load mean.
		mean := float64(sumUs) / float64(count)
		base := max(c.cbase, latencyFloor).Seconds() * 1e6
		if tol := c.cfg.Tolerance; mean <= tol*base && mean >= base/tol {
			c.lastProbe = now
			c.quiet++
		}
		c.cbase = time.Duration((base + quietWeight*(mean-base)) * 1e3)
		if !c.tail {
			c.base = c.cbase
		}
	}
	interval := max(int64(c.cfg.ProbeInterval), 20*c.windowLen())
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
	// Applied to the estimate, an equilibrium such as 7.25 would cycle.
	target := c.gradient(count, sumUs, excessUs, reached)*float64(c.held) + headroom
	target = min(target, max(c.limit, float64(2*reach+1)))
	if !reached {
		target = max(target, c.limit)
	}
	if failures > int64(count) {
		target = min(target, c.limit)
	}
	c.limit = min(max(c.limit+smoothing*(target-c.limit), float64(c.cfg.MinLimit)), float64(c.cfg.MaxLimit))
	// Raise Limit before admission, lower it after.
	n := int64(c.admission())
	if n > l.learned.Load() {
		l.learned.Store(n)
	}
	l.setAdmission(int(n))
	l.learned.Store(n)
	if c.remember(now) {
		c.early = true
		l.startProbe(now)
	}
}

// gradient returns the gradient of a window. It exceeds 1 only while
// Little's latency is within Tolerance of the samples' uncapped mean, and,
// without a cap, below the lowest estimate that read congestion.
func (c *controller) gradient(count, sumUs, excessUs uint64, reached bool) float64 {
	avg := max(float64(sumUs)/float64(count), float64(latencyFloor/time.Microsecond))
	base := max(c.cbase, latencyFloor).Seconds() * 1e6
	uncapped := (float64(sumUs) + float64(excessUs)) * 1e3 / float64(count) // ns
	tol, top := c.cfg.Tolerance, 1.0
	if c.little <= tol*uncapped && (c.tail || c.limit < c.ceil) {
		top = tol
	}
	gradient := min(max(tol*base/avg, minGradient), top)
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

// startProbe starts a probe. l.mu is held.
func (l *Limiter) startProbe(now int64) {
	c := &l.ctl
	c.progressAt = now
	c.probes++
	// After a drift to a slower dependency, answers come that late.
	c.samples, c.probeFailures, c.longest = c.samples[:0], 0, c.recentSlow
	c.drainedAt, c.closed = -1, false
	l.publishStale() // before probing is set: probeCheck reads it then
	// Set before the answered calls are counted, so countAnswer misses none.
	l.probing.Store(true)
	l.setAdmission(l.probeAdmission())
	if a := l.awaiting(); a <= c.probeLimit {
		c.drainedAt, c.progressAt, c.before = now, now, a
	}
}

// probeAdmission is the admission limit during a probe. l.mu is held.
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

// countAnswer counts the calls in flight whose answer has arrived.
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

// stallLimit is stallAge, or at least ProbeInterval before the first
// measurement with active calls in flight: the latency may be long.
func (c *controller) stallLimit(active int) int64 {
	if c.measured || active == 0 {
		return c.stallAge()
	}
	return max(c.stallAge(), int64(c.cfg.ProbeInterval))
}

// publishStale publishes when the probe may be stale. l.mu is held.
func (l *Limiter) publishStale() {
	c := &l.ctl
	l.staleAt.Store(c.progressAt + c.stallLimit(0))
	l.staleBusyAt.Store(c.progressAt + c.stallLimit(1))
}

// probeCheck runs before an admission during a probe, to end a probe that
// traffic has left. Once the probe may be stale, it waits for the lock:
// the holder may be abandoning it, and a call admitted meanwhile would
// meet the stale cap.
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

// checkProbe ends the probe running, if it is done or stale. l.mu is held.
func (l *Limiter) checkProbe() {
	if !l.probing.Load() {
		return
	}
	c := &l.ctl
	now := l.since(time.Now())
	switch {
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
	active := l.slots.Active()
	awaiting := max(active-l.answered(), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.since(end)
	if !l.probing.Load() {
		return // the probe ended meanwhile
	}
	c := &l.ctl
	// A slow dependency's first answer is progress.
	if !failed {
		c.longest = max(c.longest, d)
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
	if c.closed && (awaiting-1 <= c.before || now-c.progressAt > c.stallAge()) {
		l.finishProbe(now)
		return
	}
	l.publishStale()
}

// probeSample takes the outcome of a call not admitted before the drain,
// and reports false if the probe was abandoned. l.mu is held.
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
			c.drainedAt, c.progressAt, c.before = now, now, max(awaiting-1, 0)
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

// measure sets noLoad, base and cbase from the probe's samples, and returns
// slowFactor x noLoad, where samples are capped once a probe saw a tail.
func (c *controller) measure() time.Duration {
	s := c.samples
	slices.Sort(s)
	n := len(s)
	c.noLoad = (s[(n-1)/2] + s[n/2]) / 2
	slow := time.Duration(slowFactor * max(c.noLoad, latencyFloor))
	c.tail = s[n-1] > slow || c.early && c.tail // an early probe's few samples keep the cap
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

// endProbe ends the probe and opens a fresh window. l.mu is held.
func (l *Limiter) endProbe(now int64) {
	c := &l.ctl
	c.lastProbe = now
	if !c.measured {
		c.failedInRow++
	}
	c.hist = c.hist[:0]
	c.openActive = l.awaiting()
	c.remember(now)
	l.window.Store(0)
	l.excess.Store(0)
	l.failures.Store(0)
	l.peak.Store(0)
	l.reach.Store(0)
	l.closeAt.Store(now + c.windowLen())
	l.openedAt.Store(now)
	l.setAdmission(c.held)
	l.probing.Store(false)
}
