package policy_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// ErrShed is the rejection sentinel of the load shedder below.
var ErrShed = policy.NewSentinel("shed: overloaded")

// Shed is a user-written policy: it refuses calls while overloaded is set.
type Shed struct {
	overloaded atomic.Bool
	rejection  *policy.RejectedError
}

func NewShed(name string) *Shed {
	return &Shed{rejection: policy.NewRejectedError("shed", name, "overloaded", ErrShed)}
}

func (s *Shed) Execute(ctx context.Context, fn policy.Func) error {
	if ctx == nil {
		panic("shed: nil Context")
	}
	if fn == nil {
		panic("shed: nil fn")
	}
	if s.overloaded.Load() {
		return s.rejection
	}
	return fn(ctx)
}

// A user-written policy reports its refusals as RejectedErrors, so callers
// (and retries, and breakers) can tell a rejection from a failure.
func Example_userPolicy() {
	shed := NewShed("search")
	shed.overloaded.Store(true)

	err := shed.Execute(context.Background(), func(context.Context) error { return nil })
	var rej *policy.RejectedError
	fmt.Println(errors.Is(err, policy.ErrRejected), errors.Is(err, ErrShed), errors.As(err, &rej))
	fmt.Println(rej.Kind, rej.Name, rej.Reason)
	fmt.Println(err)
	// Output:
	// true true true
	// shed search overloaded
	// shed "search" rejected the call: overloaded
}

func ExampleDo() {
	shed := NewShed("search")
	n, err := policy.Do(context.Background(), shed, func(ctx context.Context) (int, error) {
		return 42, nil
	})
	fmt.Println(n, err)
	// Output: 42 <nil>
}

// TimedOut tells a wait that a Deadline's timer ended from the caller's
// own end; ErrTimeout matches the call's error.
func ExampleTimedOut() {
	d, err := deadline.New(deadline.Config{Name: "search", Timeout: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	err = d.Execute(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		fmt.Println("our timer:", policy.TimedOut(ctx))
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, policy.ErrTimeout), errors.Is(err, policy.ErrRejected))
	// Output:
	// our timer: true
	// true false
}

// Code that runs an fn which may mark its errors, with no retry above it to
// take the marker off, calls Unmark before handing the error on.
func ExampleUnmark() {
	errBadRequest := errors.New("400 bad request")
	err := policy.Permanent(errBadRequest)
	fmt.Println(err == errBadRequest, policy.Unmark(err) == errBadRequest)
	// Output:
	// false true
}
