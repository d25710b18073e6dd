package policy

import (
	"context"
	"fmt"
)

// Priority is how much a call matters once a limit is reached. A bulkhead
// or an adaptive limit serves its waiters highest priority first, sheds a
// lower one's place in a full queue, and may keep reserved slots that
// lower priorities never take. The zero value is [PriorityDefault].
//
// There is no ageing: a waiter is served only while no waiter of a higher
// priority waits. Under a steady load of higher priorities, a call of a
// lower one waits until its MaxWait or its context ends; with neither, it
// can wait forever. Give lower priorities a MaxWait or a deadline.
//
// There are three: work a user waits for and cannot do without (a login),
// everything else, and work that can be dropped or done later (a
// prefetch, a batch job). More classes would be more reserves to tune.
type Priority int8

// The priorities, lowest first.
const (
	PrioritySheddable Priority = -1
	PriorityDefault   Priority = 0
	PriorityCritical  Priority = 1
)

var priorityNames = [...]string{"sheddable", "default", "critical"}

// String returns "sheddable", "default" or "critical", or, for a value
// that is none of them, "Priority(n)".
func (p Priority) String() string {
	if !p.valid() {
		return fmt.Sprintf("Priority(%d)", int8(p))
	}
	return priorityNames[p+1]
}

func (p Priority) valid() bool { return p >= PrioritySheddable && p <= PriorityCritical }

// ParsePriority returns the Priority named s ("sheddable", "default" or
// "critical"), or an error for any other s.
func ParsePriority(s string) (Priority, error) {
	for i, name := range priorityNames {
		if s == name {
			return Priority(i - 1), nil
		}
	}
	return PriorityDefault, fmt.Errorf("policy: unknown priority %q", s)
}

type priorityKey struct{}

// WithPriority returns a copy of ctx that carries p, for the policies of
// every call made with it. It panics if ctx is nil or p is not one of the
// three priorities.
func WithPriority(ctx context.Context, p Priority) context.Context {
	if ctx == nil {
		panic("policy: nil Context")
	}
	if !p.valid() {
		panic("policy: unknown " + p.String())
	}
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the Priority ctx carries, or [PriorityDefault] if it
// carries none.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
