package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

// TestModel checks a Bulkhead against a model under random steps: calls
// (through Execute in goroutines, or through Enter/Exit on the test
// goroutine), their ends (return, error, panic, runtime.Goexit),
// cancellations of waiting and running callers, and the passing of time
// (MaxWait and ctx deadlines). Each rapid case runs in its own synctest
// bubble, so "every goroutine is blocked" (synctest.Wait) makes the state
// after each step exact and time is fake.
//
// After every step: Active and Queued equal the model's; the fns running are
// exactly the model's slot holders (so no slot is lost or granted twice, and
// a released slot went to the oldest waiter: FIFO hand-off); no more than
// Limit fns ran at once; every call that ended returned what the model says,
// once; and rejections were reported to OnReject per reason as counted.
//
// rapid runs 100 cases per Check (-rapid.checks); the test runs rounds of
// them, because the hand-off races the "race" step provokes need many cases
// to hit every interleaving.
func TestModel(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for range rounds {
		checkModel(t)
	}
}

func checkModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := newBulkheadModel(rt)
			rt.Repeat(map[string]func(*rapid.T){
				"call":   m.call,
				"enter":  m.enter,
				"finish": m.finish,
				"cancel": m.cancel,
				"race":   m.race,
				"sleep":  m.sleep,
				"":       m.check,
			})
		})
	})
}

// How a running call ends.
const (
	endOK = iota
	endErr
	endPanic
	endGoexit
)

var errModelFn = errors.New("fn failed")

// modelCall is one call made by the test, and what was observed of it.
type modelCall struct {
	id      int
	stage   bool // held through Enter (no goroutine)
	ctx     context.Context
	cancel  context.CancelFunc
	end     chan int // how fn must end; buffered
	runs    atomic.Int32
	done    chan struct{} // closed when the goroutine ends
	err     error         // Execute's result, once done
	ret     bool          // Execute returned (no panic, no Goexit)
	panicV  any
	checked bool // its end has been checked
}

// waiterModel is a queued call in the model.
type waiterModel struct {
	id       int
	expireAt time.Time // MaxWait; zero: none
	deadline time.Time // ctx deadline; zero: none
}

type bulkheadModel struct {
	b        *bulkhead.Bulkhead
	limit    int
	queueCap int // -1: unbounded
	maxWait  time.Duration

	calls    []*modelCall
	holders  []int         // ids holding a slot, in any order
	queue    []waiterModel // FIFO
	want     map[int]error // expected error of calls that ended
	rejected map[string]int
	inFlight atomic.Int32
	maxIn    atomic.Int32
	hookRej  [2]atomic.Int64 // full, wait_timeout
}

func newBulkheadModel(rt *rapid.T) *bulkheadModel {
	m := &bulkheadModel{
		limit:    rapid.IntRange(1, 3).Draw(rt, "limit"),
		queueCap: rapid.SampledFrom([]int{0, 1, 2, bulkhead.Unbounded}).Draw(rt, "maxQueue"),
		// Multiples of 10 ms; ctx deadlines are 5 ms off them, so no
		// MaxWait expiry ever coincides with a deadline.
		maxWait:  time.Duration(rapid.SampledFrom([]int{0, 10, 30}).Draw(rt, "maxWaitMs")) * time.Millisecond,
		want:     map[int]error{},
		rejected: map[string]int{},
	}
	b, err := bulkhead.New(bulkhead.Config{
		Name:     "model",
		Limit:    m.limit,
		MaxQueue: m.queueCap,
		MaxWait:  m.maxWait,
		OnReject: func(_ context.Context, e *policy.RejectedError) {
			switch e.Reason {
			case bulkhead.ReasonFull:
				m.hookRej[0].Add(1)
			case bulkhead.ReasonWaitTimeout:
				m.hookRej[1].Add(1)
			}
		},
	})
	if err != nil {
		rt.Fatalf("New: %v", err)
	}
	m.b = b
	// Whatever happens (a failed check included), end every call so the
	// bubble can end: cancel the waiters first, then let holders finish.
	rt.Cleanup(func() {
		for _, c := range m.calls {
			c.cancel()
		}
		synctest.Wait()
		for _, c := range m.calls {
			if c.stage {
				if !c.checked && slices.Contains(m.holders, c.id) {
					b.Exit(c.ctx, bulkhead.Permit{}, nil)
				}
				continue
			}
			select {
			case c.end <- endOK:
			default:
			}
		}
		for _, c := range m.calls {
			if !c.stage {
				<-c.done
			}
		}
		b.Close()
	})
	return m
}

func (m *bulkheadModel) queueFull() bool {
	return m.queueCap != bulkhead.Unbounded && len(m.queue) >= m.queueCap
}

func (m *bulkheadModel) newCall(rt *rapid.T, stage bool) (*modelCall, time.Time) {
	c := &modelCall{id: len(m.calls), stage: stage, end: make(chan int, 1), done: make(chan struct{})}
	var deadline time.Time
	switch rapid.IntRange(0, 3).Draw(rt, "ctx") {
	case 0, 1:
		c.ctx, c.cancel = context.WithCancel(context.Background())
	case 2:
		deadline = time.Now().Add(time.Duration(5+10*rapid.IntRange(0, 3).Draw(rt, "deadlineSteps")) * time.Millisecond)
		c.ctx, c.cancel = context.WithDeadline(context.Background(), deadline)
	case 3: // already canceled: returns ctx.Err, never counted
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.cancel()
	}
	m.calls = append(m.calls, c)
	return c, deadline
}

// fn is the body of call c: it records that it runs and waits to be told
// how to end. It ignores ctx on purpose, so that only the test ends it.
func (m *bulkheadModel) fn(c *modelCall) policy.Func {
	return func(context.Context) error {
		c.runs.Add(1)
		n := m.inFlight.Add(1)
		for {
			old := m.maxIn.Load()
			if n <= old || m.maxIn.CompareAndSwap(old, n) {
				break
			}
		}
		how := <-c.end
		m.inFlight.Add(-1)
		switch how {
		case endErr:
			return errModelFn
		case endPanic:
			panic(fmt.Sprintf("panic in call %d", c.id))
		case endGoexit:
			runtime.Goexit()
		}
		return nil
	}
}

// admit applies the arrival of call c to the model.
func (m *bulkheadModel) admit(c *modelCall, deadline time.Time) {
	switch {
	case c.ctx.Err() != nil:
		m.want[c.id] = c.ctx.Err()
	case len(m.holders) < m.limit:
		m.holders = append(m.holders, c.id)
	case !m.queueFull():
		w := waiterModel{id: c.id, deadline: deadline}
		if m.maxWait > 0 {
			w.expireAt = time.Now().Add(m.maxWait)
		}
		m.queue = append(m.queue, w)
	default:
		m.want[c.id] = errReject(bulkhead.ReasonFull)
		m.rejected[bulkhead.ReasonFull]++
	}
}

// errReject stands for a rejection with reason in the model's expectations.
type errReject string

func (e errReject) Error() string { return "rejection " + string(e) }

// call starts a call through Execute in its own goroutine.
func (m *bulkheadModel) call(rt *rapid.T) {
	c, deadline := m.newCall(rt, false)
	go func() {
		defer close(c.done)
		defer func() { c.panicV = recover() }()
		c.err = m.b.Execute(c.ctx, m.fn(c))
		c.ret = true
	}()
	synctest.Wait()
	m.admit(c, deadline)
}

// enter takes a slot through Enter on the test goroutine, when that cannot
// block (a free slot, a full queue or a done ctx).
func (m *bulkheadModel) enter(rt *rapid.T) {
	if len(m.holders) == m.limit && !m.queueFull() {
		rt.Skip("Enter would wait")
	}
	c, deadline := m.newCall(rt, true)
	_, _, err := m.b.Enter(c.ctx)
	m.admit(c, deadline)
	if slices.Contains(m.holders, c.id) {
		if err != nil {
			rt.Fatalf("call %d: Enter = %v; want a slot", c.id, err)
		}
		c.runs.Add(1)
		return
	}
	c.err, c.ret = err, true
	close(c.done)
}

// finish ends one holder, in one of the four ways.
func (m *bulkheadModel) finish(rt *rapid.T) {
	if len(m.holders) == 0 {
		rt.Skip("no holder")
	}
	id := rapid.SampledFrom(m.holders).Draw(rt, "holder")
	how := rapid.IntRange(endOK, endGoexit).Draw(rt, "how")
	c := m.calls[id]
	if c.stage {
		var fnErr, want error
		switch how {
		case endOK:
		case endErr:
			fnErr, want = errModelFn, errModelFn
		default:
			fnErr, want = policy.ErrAborted, policy.ErrAborted
		}
		if got := m.b.Exit(c.ctx, bulkhead.Permit{}, fnErr); got != want {
			rt.Fatalf("Exit(%v) = %v", fnErr, got)
		}
		c.err, c.ret = want, true
		close(c.done)
	} else {
		c.end <- how
	}
	synctest.Wait()
	m.holders = slices.DeleteFunc(m.holders, func(h int) bool { return h == id })
	switch how {
	case endOK:
		m.want[id] = nil
	case endErr:
		m.want[id] = errModelFn
	case endPanic:
		m.want[id] = errPanicked
	case endGoexit:
		m.want[id] = errGoexit
	}
	if c.stage && how >= endPanic {
		m.want[id] = policy.ErrAborted
	}
	// FIFO hand-off: the slot goes to the oldest waiter.
	if len(m.queue) > 0 {
		m.holders = append(m.holders, m.queue[0].id)
		m.queue = m.queue[1:]
	}
}

var (
	errPanicked = errors.New("panicked")
	errGoexit   = errors.New("goexit")
)

// cancel cancels the ctx of a waiter or of a holder (whose fn ignores it).
func (m *bulkheadModel) cancel(rt *rapid.T) {
	var ids []int
	for _, w := range m.queue {
		ids = append(ids, w.id)
	}
	ids = append(ids, m.holders...)
	if len(ids) == 0 {
		rt.Skip("nobody to cancel")
	}
	id := rapid.SampledFrom(ids).Draw(rt, "cancel")
	c := m.calls[id]
	c.cancel()
	synctest.Wait()
	if i := slices.IndexFunc(m.queue, func(w waiterModel) bool { return w.id == id }); i >= 0 {
		if c.ctx.Err() == context.Canceled { // not already past its deadline
			m.queue = slices.Delete(m.queue, i, i+1)
			m.want[id] = context.Canceled
		}
	}
}

// race cancels the oldest waiter and, at the same moment, ends a holder, so
// that the slot may be handed to a waiter whose ctx is done: it must either
// run fn (it was handed the slot before it saw its ctx end) or return
// ctx.Err() and pass the slot on to the next waiter, never lose it.
func (m *bulkheadModel) race(rt *rapid.T) {
	if len(m.holders) == 0 || len(m.queue) == 0 {
		rt.Skip("need a holder and a waiter")
	}
	id := rapid.SampledFrom(m.holders).Draw(rt, "holder")
	h, w := m.calls[id], m.calls[m.queue[0].id]
	// A waiter woken by one channel takes that case: cancelling first
	// makes it see its ctx end (and maybe find the slot granted); ending
	// the holder first makes it see the slot, and maybe its ctx after.
	cancelFirst := rapid.Bool().Draw(rt, "cancelFirst")
	if cancelFirst {
		w.cancel()
	}
	if h.stage {
		m.b.Exit(h.ctx, bulkhead.Permit{}, nil)
		h.err, h.ret = nil, true
		close(h.done)
	} else {
		h.end <- endOK
	}
	if !cancelFirst {
		w.cancel()
	}
	synctest.Wait()
	m.holders = slices.DeleteFunc(m.holders, func(x int) bool { return x == id })
	m.want[id] = nil
	m.holders = append(m.holders, w.id)
	m.queue = m.queue[1:]
	if w.runs.Load() == 0 { // it gave up: the slot went on
		m.holders = m.holders[:len(m.holders)-1]
		m.want[w.id] = context.Canceled
		if len(m.queue) > 0 {
			m.holders = append(m.holders, m.queue[0].id)
			m.queue = m.queue[1:]
		}
	}
}

// sleep lets fake time pass: waiters past MaxWait or their deadline leave.
func (m *bulkheadModel) sleep(rt *rapid.T) {
	d := time.Duration(10*rapid.IntRange(1, 4).Draw(rt, "sleep10ms")) * time.Millisecond
	time.Sleep(d)
	synctest.Wait()
	now := time.Now()
	m.queue = slices.DeleteFunc(m.queue, func(w waiterModel) bool {
		byWait := !w.expireAt.IsZero() && !now.Before(w.expireAt)
		byCtx := !w.deadline.IsZero() && !now.Before(w.deadline)
		switch {
		case byWait && (!byCtx || w.expireAt.Before(w.deadline)):
			m.want[w.id] = errReject(bulkhead.ReasonWaitTimeout)
			m.rejected[bulkhead.ReasonWaitTimeout]++
		case byCtx:
			m.want[w.id] = context.DeadlineExceeded
		default:
			return false
		}
		return true
	})
}

// check compares the bulkhead with the model.
func (m *bulkheadModel) check(rt *rapid.T) {
	if a, q := m.b.Active(), m.b.Queued(); a != len(m.holders) || q != len(m.queue) {
		rt.Fatalf("Active, Queued = %d, %d; model %d, %d (holders %v, queue %v)", a, q, len(m.holders), len(m.queue), m.holders, m.queue)
	}
	if len(m.holders) > m.limit {
		rt.Fatalf("model has %d holders > limit %d", len(m.holders), m.limit)
	}
	if n := m.maxIn.Load(); int(n) > m.limit {
		rt.Fatalf("%d fns ran at once; Limit is %d", n, m.limit)
	}
	for _, c := range m.calls {
		holding := slices.Contains(m.holders, c.id)
		want, ended := m.want[c.id]
		wantRuns := int32(0)
		if holding || (ended && (want == nil || want == errModelFn || want == errPanicked || want == errGoexit || (c.stage && want == policy.ErrAborted))) {
			wantRuns = 1
		}
		if r := c.runs.Load(); r != wantRuns {
			rt.Fatalf("call %d: fn ran %d times; model says %d (holders %v, queue %v)", c.id, r, wantRuns, m.holders, m.queue)
		}
		isDone := false
		select {
		case <-c.done:
			isDone = true
		default:
		}
		if isDone != ended {
			rt.Fatalf("call %d: ended = %v; model says %v (err %v)", c.id, isDone, ended, c.err)
		}
		if !ended || c.checked {
			continue
		}
		c.checked = true
		switch w := want.(type) {
		case errReject:
			var re *policy.RejectedError
			if !c.ret || !errors.As(c.err, &re) || re.Reason != string(w) || !errors.Is(c.err, bulkhead.ErrFull) {
				rt.Fatalf("call %d: err = %v; want a %s rejection", c.id, c.err, w)
			}
		default:
			switch want {
			case errPanicked:
				if c.ret || c.panicV == nil {
					rt.Fatalf("call %d: returned %v, panic %v; want the panic", c.id, c.err, c.panicV)
				}
			case errGoexit:
				if c.ret || c.panicV != nil {
					rt.Fatalf("call %d: returned %v / panicked %v; want runtime.Goexit", c.id, c.ret, c.panicV)
				}
			default:
				if !c.ret || c.err != want {
					rt.Fatalf("call %d: err = %v (returned %v); want %v", c.id, c.err, c.ret, want)
				}
			}
		}
	}
	if f, w := m.hookRej[0].Load(), m.hookRej[1].Load(); f != int64(m.rejected[bulkhead.ReasonFull]) || w != int64(m.rejected[bulkhead.ReasonWaitTimeout]) {
		rt.Fatalf("OnReject saw full=%d wait_timeout=%d; model %v", f, w, m.rejected)
	}
}
