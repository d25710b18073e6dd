package slots

// waiter is one caller waiting for a slot. It is linked into its Slots'
// queue through prev and next (an intrusive list), so that a caller giving
// up can unlink itself in O(1) without scanning. All fields but ready are
// guarded by the Slots mutex.
type waiter struct {
	prev, next *waiter
	// granted is set, under the mutex, when a release hands this waiter a
	// slot; the waiter is unlinked at the same moment. It is how a waiter
	// that wakes for another reason learns that it already holds a slot.
	granted bool
	// shed is set, under the mutex, when a caller of a higher class takes
	// this waiter's place in the full queue; it is unlinked at once.
	shed  bool
	class int
	// ready receives one value when the slot is handed over. It has a
	// buffer of 1 so that the releaser never blocks while holding the mutex.
	ready chan struct{}
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
