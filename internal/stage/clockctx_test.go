package stage_test

import (
	"context"
	"testing"

	"github.com/watertight/watertight/internal/stage"
)

func TestClockContext(t *testing.T) {
	type k struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), k{}, "v"))
	var c stage.ClockContext
	ctx := c.Init(parent)
	if stage.AnswerClockFrom(ctx) != &c.Clock || ctx.Value(k{}) != "v" {
		t.Fatalf("clock %p (want %p), value %v", stage.AnswerClockFrom(ctx), &c.Clock, ctx.Value(k{}))
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	<-child.Done() // the parent's cancellation reaches the child
	if stage.AnswerClockFrom(child) != &c.Clock {
		t.Fatal("child lost the clock")
	}
}
