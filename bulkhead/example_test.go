package bulkhead_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/policy"
)

// A bulkhead with one slot and no queue rejects a second call at once while
// the first is running.
func Example() {
	b, err := bulkhead.New(bulkhead.Config{Name: "llm", Limit: 1})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- b.Execute(context.Background(), func(ctx context.Context) error {
			close(started)
			<-release // a slow upstream
			return nil
		})
	}()
	<-started

	err = b.Execute(context.Background(), func(ctx context.Context) error {
		fmt.Println("not reached")
		return nil
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, bulkhead.ErrFull), errors.Is(err, policy.ErrRejected))
	var re *policy.RejectedError
	if errors.As(err, &re) {
		fmt.Println(re.Kind, re.Name, re.Reason)
	}
	fmt.Println("active:", b.Active())

	close(release)
	fmt.Println("first call:", <-done)
	fmt.Println("active:", b.Active())
	// Output:
	// bulkhead "llm" rejected the call: full
	// true true
	// bulkhead llm full
	// active: 1
	// first call: <nil>
	// active: 0
}

// With a queue, a call waits for a slot, up to MaxWait; a slot freed by a
// finished call goes to the oldest waiter.
func Example_queue() {
	b, err := bulkhead.New(bulkhead.Config{
		Name:     "db",
		Limit:    1,
		MaxQueue: 10,
		MaxWait:  time.Minute,
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// A first call takes the only slot and holds it until release closes.
	release, holding := make(chan struct{}), make(chan struct{})
	first := make(chan error)
	go func() {
		first <- b.Execute(context.Background(), func(ctx context.Context) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	done := make(chan error)
	go func() {
		done <- b.Execute(context.Background(), func(ctx context.Context) error {
			fmt.Println("waiter runs")
			return nil
		})
	}()
	for b.Queued() == 0 { // only for the example: wait until it queues
		runtime.Gosched()
	}
	fmt.Println("active:", b.Active(), "queued:", b.Queued())
	close(release) // the first call ends and hands its slot to the waiter
	firstErr, waiterErr := <-first, <-done
	fmt.Println("first:", firstErr, "waiter:", waiterErr)
	fmt.Println("active:", b.Active(), "queued:", b.Queued())
	// Output:
	// active: 1 queued: 1
	// waiter runs
	// first: <nil> waiter: <nil>
	// active: 0 queued: 0
}

func ExampleNew_invalid() {
	_, err := bulkhead.New(bulkhead.Config{Limit: 0})
	fmt.Println(err)
	// Output:
	// bulkhead: Config.Limit must be >= 1, got 0
}

// A slot can be held beyond one function call, for as long as a websocket
// or a stream read by the caller lasts: Acquire takes it, Release frees it.
func ExampleBulkhead_Acquire() {
	b, err := bulkhead.New(bulkhead.Config{Name: "ws", Limit: 1})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	conn, err := b.Acquire(context.Background()) // a websocket opens
	if err != nil {
		panic(err)
	}
	_, err = b.Acquire(context.Background()) // a second one finds no slot
	fmt.Println(err)

	conn.Release() // the first closes
	next, err := b.Acquire(context.Background())
	fmt.Println(err, b.Active())
	next.Release()
	// Output:
	// bulkhead "ws" rejected the call: full
	// <nil> 1
}
