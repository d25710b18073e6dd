package slots

// waiter is one caller waiting for a slot. It is linked into its line
// through prev and next (an intrusive list), so that a caller giving up
// can unlink itself in O(1) without scanning. All fields but ready are
// guarded by the Slots mutex.
type waiter struct {
	prev, next *waiter
	// granted is set, under the mutex, when a release hands this waiter a
	// slot; the waiter is unlinked at the same moment. It is how a waiter
	// that wakes for another reason learns that it already holds a slot.
	granted bool
	// counted is set with granted when the slot counts against its key's
	// MaxPerKey.
	counted bool
	// shed is set, under the mutex, when a newcomer takes this waiter's
	// place in the full queue; it is unlinked at once.
	shed bool
	// line is the line the waiter queues in: its key's, of its class.
	line *line
	// ready receives one value when the slot is handed over. It has a
	// buffer of 1 so that the releaser never blocks while holding the mutex.
	ready chan struct{}
}

// held returns what the waiter, granted a slot, must give to Release.
func (w *waiter) held() Held {
	if w.counted {
		return Held{w.line.share}
	}
	return Held{}
}

// waitList is a FIFO doubly linked list of waiters. The zero value is an
// empty list. It is not safe for concurrent use: the Slots mutex
// guards it.
type waitList struct {
	head, tail *waiter
	len        int
}

// pushBack appends w, the newest waiter.
func (l *waitList) pushBack(w *waiter) {
	w.prev = l.tail
	w.next = nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.len++
}

// remove unlinks w, which must be in l, in O(1).
func (l *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.len--
}

// share is one key's part of a Slots: its waiters, one line per class,
// and the slots it holds that count against MaxPerKey. Without FairShare
// every caller is in one share. Guarded by the Slots mutex.
type share struct {
	lines [classes]line
	key   string
	held  int
}

// init links the lines of a new share to it.
func (sh *share) init(key string) {
	sh.key = key
	for c := range sh.lines {
		sh.lines[c].share, sh.lines[c].class = sh, c
	}
}

// waiting returns the share's waiters, of every class.
func (sh *share) waiting() int {
	return sh.lines[0].len + sh.lines[1].len + sh.lines[2].len
}

// line is the waiters of one key and one class, first come first served.
// While it has waiters it is in its class's ring, through prev and next.
type line struct {
	waitList
	prev, next *line
	share      *share
	class      int
}

// ring is the lines of one class that have waiters, in the order of their
// turns: a slot goes to the first line whose key may take it, and that
// line moves to the back. It is the round robin of the fair share; without
// FairShare it holds at most one line. The zero value is an empty ring.
type ring struct{ head, tail *line }

// pushBack appends l, the line whose turn comes last.
func (r *ring) pushBack(l *line) {
	l.prev = r.tail
	l.next = nil
	if r.tail != nil {
		r.tail.next = l
	} else {
		r.head = l
	}
	r.tail = l
}

// remove unlinks l, which must be in r, in O(1).
func (r *ring) remove(l *line) {
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		r.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		r.tail = l.prev
	}
	l.prev, l.next = nil, nil
}

// longest returns the line with the most waiters, nil if r is empty. Of
// lines as long, it returns the one whose turn comes last. It scans the
// ring: it runs only when the queue is full, over at most MaxQueue lines.
func (r *ring) longest() *line {
	var best *line
	for l := r.tail; l != nil; l = l.prev {
		if best == nil || l.len > best.len {
			best = l
		}
	}
	return best
}
