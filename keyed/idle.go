package keyed

// idleList is a doubly linked list of the entries no call holds, most
// recently used first. The zero value is empty. It is guarded by the
// Group's mutex.
type idleList struct{ head, tail *entry }

func (l *idleList) pushFront(e *entry) {
	e.prev, e.next = nil, l.head
	if l.head != nil {
		l.head.prev = e
	} else {
		l.tail = e
	}
	l.head = e
}

func (l *idleList) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}
