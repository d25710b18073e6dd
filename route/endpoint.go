package route

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/internal/stage"
)

// endpoint is the live state of one Endpoint. The pick reads only its
// atomics; a call's start and end take its mutex once each.
type endpoint struct {
	picked Picked               // what the attempts sent to it carry
	held   func() time.Duration // the RateLimit's hold, if it has one

	pending atomic.Int64 // calls in flight
	cost    atomic.Int64 // the peak EWMA of latency in ns; 0: none yet
	oldest  atomic.Int64 // start of the oldest unanswered call; 0: none
	first   atomic.Pointer[stage.Sample]
	out     atomic.Int64 // 0: in; else when its next probe is due
	ejected atomic.Bool  // out as an outlier, counted against the share
	probing atomic.Bool  // a probe is in flight
	misses  atomic.Int32 // probes in a row that ran and did not bring it back
	back    atomic.Int64 // when it last came back; 0: never out

	mu    sync.Mutex
	stamp int64   // the last latency's time
	ewma  float64 // ns
	calls calls   // the unanswered calls, oldest first
}

// load is e's load score at now: its latency estimate times its calls in
// flight and the one to come, over its weight w (as it ramps up over ramp
// after a return).
func (e *endpoint) load(now int64, w float64, ramp int64, prune bool) float64 {
	return float64(e.costAt(now, prune)) * float64(e.pending.Load()+1) / e.weightAt(now, w, ramp)
}

// weightAt is e's weight w at now: from a tenth of it when it came back
// to all of it ramp later, so that the calls an endpoint that comes back
// takes rise gradually, not in a herd.
func (e *endpoint) weightAt(now int64, w float64, ramp int64) float64 {
	b := e.back.Load()
	if b == 0 || now-b >= ramp {
		return w
	}
	return w * max(0.1, float64(now-b)/float64(ramp))
}

// costAt is e's latency estimate at now: the peak EWMA of its latencies,
// or the age of its oldest unanswered call if that is more, so that an
// endpoint whose calls hang looks slow before any of them ends. With
// prune, a stream that has answered no longer counts as unanswered.
func (e *endpoint) costAt(now int64, prune bool) int64 {
	c := e.cost.Load()
	o := e.oldest.Load()
	if o == 0 || now-o <= c {
		return c
	}
	if s := e.first.Load(); prune && s != nil && s.Answered() {
		// The oldest call is a stream that has answered: its age is no
		// latency. Rare, so a lock is fine.
		e.mu.Lock()
		e.calls.pruneAnswered()
		e.publishLocked()
		e.mu.Unlock()
		if o = e.oldest.Load(); o == 0 || now-o <= c {
			return c
		}
	}
	return now - o
}

// begin records a call started at now, timed by s.
func (e *endpoint) begin(now int64, s *stage.Sample) int32 {
	e.mu.Lock()
	n := e.calls.push(now, s)
	if e.calls.head == n {
		e.publishLocked()
	}
	e.mu.Unlock()
	return n
}

// end records the end of call n (-1: not listed) at now, with its latency
// if observed.
func (e *endpoint) end(n int32, now int64, latency float64, observed bool, decay float64) {
	e.mu.Lock()
	switch {
	case n < 0: // not listed
	case e.calls.head == n:
		e.calls.remove(n)
		e.publishLocked()
	default:
		e.calls.remove(n)
	}
	if observed {
		td := max(now-e.stamp, 0)
		e.stamp = now
		// Finagle's peak EWMA: a slower latency is taken at once, a faster
		// one weighs by the time since the last.
		if latency < e.ewma {
			w := math.Exp(-float64(td) / decay)
			e.ewma = e.ewma*w + latency*(1-w)
		} else {
			e.ewma = latency
		}
		e.ewma = min(e.ewma, ceiling)
		e.cost.Store(max(int64(e.ewma), 1))
	}
	e.mu.Unlock()
	e.pending.Add(-1)
}

// ceiling caps an estimate, which failures double.
const ceiling = float64(10 * time.Minute)

// reset sets e's latency estimate to latency, as of now.
func (e *endpoint) reset(now int64, latency float64) {
	e.mu.Lock()
	e.stamp, e.ewma = now, latency
	e.cost.Store(max(int64(latency), 1))
	e.mu.Unlock()
}

// publishLocked publishes the oldest unanswered call.
func (e *endpoint) publishLocked() {
	if h := e.calls.head; h >= 0 {
		e.oldest.Store(e.calls.nodes[h].start)
		e.first.Store(e.calls.nodes[h].s)
		return
	}
	e.oldest.Store(0)
	e.first.Store(nil)
}

// calls is a list of calls in order of start, in a slab: it allocates only
// to grow past the most calls it has held at once.
type calls struct {
	nodes      []node
	head, tail int32 // -1: empty
	free       int32 // the first free node, -1: none
}

type node struct {
	start      int64
	s          *stage.Sample
	prev, next int32 // next also links the free nodes
	listed     bool  // in the list, not pruned
}

func newCalls() calls { return calls{head: -1, tail: -1, free: -1} }

func (l *calls) push(start int64, s *stage.Sample) int32 {
	n := l.free
	if n >= 0 {
		l.free = l.nodes[n].next
	} else {
		n = int32(len(l.nodes))
		l.nodes = append(l.nodes, node{})
	}
	l.nodes[n] = node{start: start, s: s, prev: l.tail, next: -1, listed: true}
	if l.tail >= 0 {
		l.nodes[l.tail].next = n
	} else {
		l.head = n
	}
	l.tail = n
	return n
}

// remove frees node n, unlinking it if it is still listed.
func (l *calls) remove(n int32) {
	if l.nodes[n].listed {
		l.unlink(n)
	}
	l.nodes[n] = node{next: l.free}
	l.free = n
}

func (l *calls) unlink(n int32) {
	nd := &l.nodes[n]
	if nd.prev >= 0 {
		l.nodes[nd.prev].next = nd.next
	} else {
		l.head = nd.next
	}
	if nd.next >= 0 {
		l.nodes[nd.next].prev = nd.prev
	} else {
		l.tail = nd.prev
	}
	nd.listed = false
}

// pruneAnswered unlists the oldest calls while they have answered.
func (l *calls) pruneAnswered() {
	for l.head >= 0 && l.nodes[l.head].s != nil && l.nodes[l.head].s.Answered() {
		l.unlink(l.head)
	}
}
