package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/policy"
)

// TestModel checks a Breaker against a model of its documented state
// machine: the consecutive and ratio trip rules over a rolling window of 10
// buckets timed from the last change of state, OpenTimeout, half-open probes
// (HalfOpenRequests, excluded probes freeing their place, late outcomes of
// an earlier generation dropped), ForceOpen and Reset, and the outcome
// classes (success, failure, !IsFailure, context.Canceled and rejections
// excluded, panic and runtime.Goexit failures). Each rapid case runs in a
// synctest bubble, so time (gobreaker's time.Now) is fake and moves only
// when the model sleeps.
//
// After every step: the OnStateChange hook has seen exactly the model's
// transitions in order, and each call was admitted (fn ran once) or
// rejected with the model's reason. The actions "state" and "counts"
// compare State and Counts with the model's.
//
// rapid runs 100 cases per Check (-rapid.checks); the test runs rounds of
// them, as rare states (half-open with every probe taken) need more.
func TestModel(t *testing.T) {
	for range modelRounds() {
		checkModel(t)
	}
}

// modelRounds is how many rounds of rapid.Check TestModel runs.
func modelRounds() int {
	if testing.Short() {
		return 3
	}
	return 10
}

func checkModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := newBreakerModel(rt)
			rt.Repeat(map[string]func(*rapid.T){
				"call":      m.call,
				"burst":     m.burst,
				"state":     m.checkState,
				"counts":    m.checkCounts,
				"hold":      m.hold,
				"release":   m.release,
				"sleep":     m.sleep,
				"forceOpen": m.forceOpen,
				"reset":     m.reset,
				"":          m.check,
			})
		})
	})
}

// Outcomes of a call, as fn (or Exit) reports them.
const (
	outOK = iota
	outFail
	outBenign   // an error IsFailure says is not a failure: a success
	outCanceled // context.Canceled: excluded
	outRejected // an inner policy's rejection: excluded
	outPanic    // failure (policy.ErrAborted)
	outGoexit   // failure (policy.ErrAborted)
)

var (
	errFail   = errors.New("dependency failed")
	errBenign = errors.New("not found")
	errInner  = policy.NewRejectedError("bulkhead", "inner", "full", nil)
	errCancel = fmt.Errorf("call: %w", context.Canceled)
)

func outcomeErr(o int) error {
	switch o {
	case outFail:
		return errFail
	case outBenign:
		return errBenign
	case outCanceled:
		return errCancel
	case outRejected:
		return errInner
	case outPanic, outGoexit:
		return policy.ErrAborted
	}
	return nil
}

// token is a call admitted by Enter whose outcome has not been reported.
type token struct {
	ctx     context.Context
	tok     breaker.Permit
	machine int    // model machine (Reset makes a new one)
	gen     uint64 // model generation (every change of state makes one)
}

type outcome struct {
	age      int64
	fail     bool
	excluded bool
}

type breakerModel struct {
	b *breaker.Breaker

	consecutive int
	ratio       float64
	minRequests int
	window      time.Duration // 0: none
	openTimeout time.Duration
	halfOpen    int

	state    breaker.State // of the current machine
	forced   bool
	machine  int
	gen      uint64
	start    time.Time // last change of state
	openedAt time.Time
	closed   []outcome // while closed: outcomes, oldest first
	admitted []int64   // while closed: the ages of the calls admitted
	requests int       // while half-open
	excluded int
	succ     int

	last  breaker.State // last state reported
	want  []string      // transitions the model expects, in order
	got   []string      // transitions OnStateChange saw
	held  []token
	fnRan int
}

func newBreakerModel(rt *rapid.T) *breakerModel {
	cfg := breaker.Config{
		Name:                "model",
		ConsecutiveFailures: uint32(rapid.IntRange(0, 3).Draw(rt, "consecutive")),
		FailureRatio:        rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(rt, "ratio"),
		MinRequests:         uint32(rapid.IntRange(0, 4).Draw(rt, "minRequests")),
		Window:              rapid.SampledFrom([]time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond}).Draw(rt, "window"),
		OpenTimeout:         rapid.SampledFrom([]time.Duration{0, 50 * time.Millisecond}).Draw(rt, "openTimeout"),
		HalfOpenRequests:    uint32(rapid.IntRange(0, 3).Draw(rt, "halfOpen")),
		// Only errFail is a failure: policy.ErrAborted must still count
		// as one, whatever IsFailure says.
		IsFailure: func(err error) bool { return errors.Is(err, errFail) },
	}
	m := &breakerModel{
		consecutive: int(cfg.ConsecutiveFailures),
		ratio:       cfg.FailureRatio,
		minRequests: int(cfg.MinRequests),
		window:      cfg.Window,
		openTimeout: cfg.OpenTimeout,
		halfOpen:    int(cfg.HalfOpenRequests),
		start:       time.Now(),
	}
	// The documented defaults.
	if m.consecutive == 0 && m.ratio == 0 {
		m.consecutive = 5
	}
	if m.ratio > 0 {
		if m.minRequests == 0 {
			m.minRequests = 10
		}
		if m.window == 0 {
			m.window = 60 * time.Second
		}
	}
	if m.openTimeout == 0 {
		m.openTimeout = 30 * time.Second
	}
	if m.halfOpen == 0 {
		m.halfOpen = 1
	}
	cfg.OnStateChange = func(from, to breaker.State) { m.got = append(m.got, from.String()+">"+to.String()) }
	b, err := breaker.New(cfg)
	if err != nil {
		rt.Fatalf("New: %v", err)
	}
	m.b = b
	rt.Cleanup(func() {
		for _, h := range m.held {
			b.Exit(h.ctx, h.tok, nil)
		}
		b.Close()
	})
	return m
}

// report records a state change of the breaker as seen by its hooks.
func (m *breakerModel) report(to breaker.State) {
	if to != m.last {
		m.want = append(m.want, m.last.String()+">"+to.String())
		m.last = to
	}
}

func (m *breakerModel) setState(to breaker.State) {
	if m.state == to {
		return
	}
	m.state = to
	m.gen++
	m.start = time.Now()
	m.closed, m.admitted, m.requests, m.excluded, m.succ = nil, nil, 0, 0, 0
	if to == breaker.Open {
		m.openedAt = m.start
	}
	if !m.forced {
		m.report(to)
	}
}

// age is the number of the window's bucket now.
func (m *breakerModel) age() int64 {
	if m.window == 0 {
		return 0
	}
	return int64(time.Since(m.start) / (m.window / 10))
}

// observe is gobreaker being asked for its state now.
func (m *breakerModel) observe() {
	if m.state == breaker.Open && time.Since(m.openedAt) >= m.openTimeout {
		m.setState(breaker.HalfOpen)
	}
}

// inWindow reports whether a call admitted at age is still in the window.
func (m *breakerModel) inWindow(age int64) bool {
	return m.window == 0 || age > m.age()-10
}

// live returns the successes, failures and run of failures (since the last
// success) that the window still holds.
func (m *breakerModel) live() (succ, fail, run int) {
	c := m.closedCounts()
	return int(c.TotalSuccesses), int(c.TotalFailures), int(c.ConsecutiveFailures)
}

// closedCounts returns the counts of a closed breaker: those of the calls
// admitted and outcomes reported that the window still holds.
func (m *breakerModel) closedCounts() breaker.Counts {
	var c breaker.Counts
	for _, age := range m.admitted {
		if m.inWindow(age) {
			c.Requests++
		}
	}
	for _, o := range m.closed {
		switch {
		case !m.inWindow(o.age):
		case o.excluded:
			c.TotalExclusions++
		case o.fail:
			c.TotalFailures++
			c.ConsecutiveFailures++
			c.ConsecutiveSuccesses = 0
		default:
			c.TotalSuccesses++
			c.ConsecutiveSuccesses++
			c.ConsecutiveFailures = 0
		}
	}
	return c
}

// admit is Enter: it returns "" if the call is let through, else the reason.
func (m *breakerModel) admit() string {
	if m.forced {
		return breaker.ReasonOpen
	}
	m.observe()
	switch m.state {
	case breaker.Open:
		return breaker.ReasonOpen
	case breaker.Closed:
		m.admitted = append(m.admitted, m.age())
	case breaker.HalfOpen:
		if m.requests-m.excluded >= m.halfOpen {
			return breaker.ReasonHalfOpenFull
		}
		m.requests++
	}
	return ""
}

// outcome is Exit's report of a call admitted in generation gen of machine.
func (m *breakerModel) outcome(machine int, gen uint64, age int64, o int) {
	if machine != m.machine || m.forced {
		return // an old machine's call, or the machine under ForceOpen: unseen
	}
	m.observe()
	if gen != m.gen {
		return
	}
	excluded := o == outCanceled || o == outRejected
	fail := o == outFail || o == outPanic || o == outGoexit
	switch m.state {
	case breaker.Closed:
		if m.window > 0 && age <= m.age()-10 {
			return
		}
		m.closed = append(m.closed, outcome{age: age, fail: fail, excluded: excluded})
		if excluded || !fail {
			return
		}
		succ, failures, run := m.live()
		n := succ + failures
		if (m.consecutive > 0 && run >= m.consecutive) ||
			(m.ratio > 0 && n >= m.minRequests && float64(failures)/float64(n) >= m.ratio) {
			m.setState(breaker.Open)
		}
	case breaker.HalfOpen:
		switch {
		case excluded:
			m.excluded++
		case fail:
			m.setState(breaker.Open)
		default:
			m.succ++
			if m.succ >= m.halfOpen {
				m.setState(breaker.Closed)
			}
		}
	}
}

func (m *breakerModel) wantRejected(rt *rapid.T, err error, reason string) {
	var re *policy.RejectedError
	if !errors.As(err, &re) || re.Kind != "breaker" || re.Name != "model" || re.Reason != reason ||
		!errors.Is(err, breaker.ErrOpen) {
		rt.Fatalf("err = %v; want a breaker rejection %q (model state %v, forced %v)", err, reason, m.state, m.forced)
	}
}

// drawOutcome draws an outcome, failures and successes more often.
func drawOutcome(rt *rapid.T) int {
	return rapid.SampledFrom([]int{outOK, outOK, outFail, outFail, outFail, outBenign,
		outCanceled, outRejected, outPanic, outGoexit}).Draw(rt, "outcome")
}

// burst runs a few calls with the same outcome, to reach trips sooner.
func (m *breakerModel) burst(rt *rapid.T) {
	o := drawOutcome(rt)
	for range rapid.IntRange(1, 5).Draw(rt, "n") {
		m.callWith(rt, o)
	}
}

// call runs one call through Execute with a drawn outcome.
func (m *breakerModel) call(rt *rapid.T) { m.callWith(rt, drawOutcome(rt)) }

func (m *breakerModel) callWith(rt *rapid.T, o int) {
	ran := false
	var err error
	var panicV any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicV = recover() }()
		err = m.b.Execute(context.Background(), func(context.Context) error {
			ran = true
			switch o {
			case outPanic:
				panic("probe panicked")
			case outGoexit:
				runtime.Goexit()
			}
			return outcomeErr(o)
		})
	}()
	<-done
	reason := m.admit()
	if reason != "" {
		if ran {
			rt.Fatalf("fn ran; the model rejects with %q", reason)
		}
		m.wantRejected(rt, err, reason)
		return
	}
	if !ran {
		rt.Fatalf("fn did not run (err %v); the model admits it (state %v)", err, m.state)
	}
	m.fnRan++
	switch o {
	case outPanic:
		if panicV == nil {
			rt.Fatalf("the panic was swallowed: err %v", err)
		}
	case outGoexit:
	default:
		if want := outcomeErr(o); err != want {
			rt.Fatalf("Execute = %v; want fn's error %v unchanged", err, want)
		}
	}
	m.outcome(m.machine, m.gen, m.age(), o)
}

// hold admits a call with Enter and keeps it running. Outcomes reported late
// are only modelled where their order cannot matter: in half-open (probes),
// or closed without a window.
func (m *breakerModel) hold(rt *rapid.T) {
	m.observe()
	if !m.forced && m.state == breaker.Closed && m.window > 0 {
		rt.Skip("late outcomes in a rolling window are not modelled")
	}
	ctx, tok, err := m.b.Enter(context.Background())
	reason := m.admit()
	if reason != "" {
		m.wantRejected(rt, err, reason)
		return
	}
	if err != nil {
		rt.Fatalf("Enter = %v; the model admits the call (state %v)", err, m.state)
	}
	m.held = append(m.held, token{ctx: ctx, tok: tok, machine: m.machine, gen: m.gen})
}

// release reports the outcome of a held call with Exit.
func (m *breakerModel) release(rt *rapid.T) {
	if len(m.held) == 0 {
		rt.Skip("nothing held")
	}
	i := rapid.IntRange(0, len(m.held)-1).Draw(rt, "held")
	o := drawOutcome(rt)
	h := m.held[i]
	m.held = slices.Delete(m.held, i, i+1)
	if got := m.b.Exit(h.ctx, h.tok, outcomeErr(o)); got != outcomeErr(o) {
		rt.Fatalf("Exit returned %v; want %v unchanged", got, outcomeErr(o))
	}
	m.outcome(h.machine, h.gen, 0, o)
}

func (m *breakerModel) sleep(rt *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{
		time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
		50 * time.Millisecond, 85 * time.Millisecond, 100 * time.Millisecond, 30 * time.Second,
	}).Draw(rt, "sleep")
	time.Sleep(d)
	synctest.Wait()
}

func (m *breakerModel) forceOpen(*rapid.T) {
	m.b.ForceOpen()
	if !m.forced {
		m.forced = true
		m.report(breaker.Open)
	}
}

func (m *breakerModel) reset(*rapid.T) {
	m.b.Reset()
	m.forced = false
	m.machine++
	m.gen++
	m.state = breaker.Closed
	m.start = time.Now()
	m.closed, m.admitted, m.requests, m.excluded, m.succ = nil, nil, 0, 0, 0
	m.report(breaker.Closed)
}

// checkState compares State with the model. It is an action, not part of
// the invariant: State asks gobreaker, which turns an open breaker
// half-open once OpenTimeout has passed, so asking after every step would
// hide a breaker that only notices on the next call.
func (m *breakerModel) checkState(rt *rapid.T) {
	got := m.b.State()
	want := breaker.Open
	if !m.forced {
		m.observe()
		want = m.state
	}
	if got != want {
		rt.Fatalf("State = %v; model %v (forced %v)", got, want, m.forced)
	}
	m.check(rt)
}

// checkCounts compares Counts with the model. Like State, Counts moves
// gobreaker on to now, so it is an action too.
func (m *breakerModel) checkCounts(rt *rapid.T) {
	got := m.b.Counts()
	var want breaker.Counts
	if !m.forced {
		m.observe()
		switch m.state {
		case breaker.Closed:
			want = m.closedCounts()
		case breaker.HalfOpen:
			want = breaker.Counts{
				Requests:             uint32(m.requests),
				TotalSuccesses:       uint32(m.succ),
				TotalExclusions:      uint32(m.excluded),
				ConsecutiveSuccesses: uint32(m.succ),
			}
		}
	}
	if got != want {
		rt.Fatalf("Counts = %+v; model %+v (state %v, forced %v)", got, want, m.state, m.forced)
	}
	m.check(rt)
}

// check is the invariant: the hook saw exactly the model's transitions.
func (m *breakerModel) check(rt *rapid.T) {
	if !slices.Equal(m.got, m.want) {
		rt.Fatalf("OnStateChange saw %v; model %v", m.got, m.want)
	}
}
