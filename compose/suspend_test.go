package compose_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

func suspender(t *testing.T, p *compose.Pipeline) funcSuspender {
	t.Helper()
	s := stage.SuspenderOf(p)
	if s == nil {
		t.Fatal("the pipeline cannot suspend")
	}
	return funcSuspender{s}
}

// funcSuspender runs a func as a stage.Suspender's Attempter.
type funcSuspender struct{ s stage.Suspender }

func (f funcSuspender) ExecuteSuspendable(ctx context.Context, fn attemptFunc) (stage.Suspended, error) {
	return f.s.ExecuteSuspendable(ctx, fn)
}

// attemptFunc is a func as a stage.Attempter.
type attemptFunc func(ctx context.Context) error

func (f attemptFunc) Attempt(ctx context.Context) error { return f(ctx) }

// A call suspended by fn runs no exit until Resume, which runs them
// innermost first with fn's outcome, on Resume's goroutine.
func TestSuspendDefersExitsToResume(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	calls := 0
	sp, err := suspender(t, p).ExecuteSuspendable(context.Background(), func(context.Context) error {
		calls++
		return stage.ErrSuspend
	})
	if err != nil || sp == nil {
		t.Fatalf("ExecuteSuspendable = %v, %v; want a suspension", sp, err)
	}
	if got := j.String(); strings.Contains(got, "exit") {
		t.Fatalf("a stage exited before Resume: %s", got)
	}
	if err := sp.Resume(nil); err != nil {
		t.Fatalf("Resume = %v", err)
	}
	want := "[enter bulkhead enter deadline attempt 1 enter breaker enter attempt " +
		"exit attempt <nil> exit breaker <nil> exit deadline <nil> exit bulkhead <nil>]"
	if got := j.String(); got != want || calls != 1 {
		t.Errorf("got  %s (%d calls)\nwant %s", got, calls, want)
	}
}

// A call that does not suspend ends in ExecuteSuspendable as in Execute.
func TestSuspendableWithoutSuspension(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	boom := errors.New("boom")
	sp, err := suspender(t, p).ExecuteSuspendable(context.Background(), func(context.Context) error { return boom })
	if sp != nil || err != boom {
		t.Fatalf("ExecuteSuspendable = %v, %v; want nil, boom", sp, err)
	}
	j2 := &journal{}
	p2, _ := compose.New("x", stages(j2))
	p2.Execute(context.Background(), func(context.Context) error { return boom })
	if j.String() != j2.String() {
		t.Errorf("suspendable path %s\nExecute         %s", j, j2)
	}
}

// The retry judges the suspended attempt's outcome at Resume: a failure
// it retries runs the next attempt on Resume's goroutine.
func TestResumeRetries(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	boom := errors.New("boom")
	calls := 0
	sp, _ := suspender(t, p).ExecuteSuspendable(context.Background(), func(ctx context.Context) error {
		calls++
		if calls == 1 {
			return stage.ErrSuspend
		}
		return nil
	})
	if err := sp.Resume(boom); err != nil {
		t.Fatalf("Resume = %v, want the second attempt's success", err)
	}
	want := "[enter bulkhead enter deadline attempt 1 enter breaker enter attempt " +
		"exit attempt boom exit breaker boom attempt 2 enter breaker enter attempt " +
		"exit attempt <nil> exit breaker <nil> exit deadline <nil> exit bulkhead <nil>]"
	if got := j.String(); got != want || calls != 2 {
		t.Errorf("got  %s (%d calls)\nwant %s", got, calls, want)
	}
	// At its last attempt, the failure ends the call.
	j2 := &journal{}
	p2, _ := compose.New("x", stages(j2))
	calls = 0
	sp, _ = suspender(t, p2).ExecuteSuspendable(context.Background(), func(ctx context.Context) error {
		calls++
		if calls == 2 {
			return stage.ErrSuspend
		}
		return boom
	})
	if err := sp.Resume(boom); err != boom || calls != 2 {
		t.Fatalf("Resume = %v after %d calls, want boom after 2", err, calls)
	}
}

// panicExit is a stage whose Exit panics.
type panicExit struct{ fakeStage }

func (s *panicExit) Exit(ctx context.Context, token stage.Token, err error) error {
	s.fakeStage.Exit(ctx, token, err)
	panic("exit exploded")
}

func (s *panicExit) Execute(ctx context.Context, fn policy.Func) error { return stage.Run(ctx, s, fn) }

// A stage whose Exit panics at Resume: the stages outside it exit with
// ErrAborted, and the panic goes on up Resume's caller.
func TestResumePanicAbortsOuterStages(t *testing.T) {
	j := &journal{}
	pols := stages(j)
	pols.Breaker = &panicExit{fakeStage{name: "breaker", j: j}}
	p, _ := compose.New("x", pols)
	sp, _ := suspender(t, p).ExecuteSuspendable(context.Background(), func(context.Context) error { return stage.ErrSuspend })
	func() {
		defer func() {
			if r := recover(); r != "exit exploded" {
				t.Errorf("recovered %v", r)
			}
		}()
		sp.Resume(nil)
	}()
	ab := stage.ErrAborted.Error()
	want := "[enter bulkhead enter deadline attempt 1 enter breaker enter attempt " +
		"exit attempt <nil> exit breaker <nil> exit deadline " + ab + " exit bulkhead " + ab + "]"
	if got := j.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A panic in fn before it suspends frees every stage, as under Execute.
func TestSuspendablePanicFreesEveryStage(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v", r)
			}
		}()
		suspender(t, p).ExecuteSuspendable(context.Background(), func(context.Context) error { panic("kaboom") })
	}()
	if got := j.String(); strings.Count(got, "exit ") != 4 || strings.Count(got, stage.ErrAborted.Error()) != 4 {
		t.Errorf("not every stage exited with ErrAborted: %s", got)
	}
}

// The call's and the attempt's spans end at Resume, with its outcome.
func TestSuspendedSpansEndAtResume(t *testing.T) {
	sr, tp := newTracing(t)
	p, _ := compose.New("llm", compose.Policies{
		Retry:   &fakeRepeater{max: 1},
		Breaker: &fakeStage{name: "breaker"},
	}, compose.WithTracerProvider(tp))
	sp, _ := suspender(t, p).ExecuteSuspendable(context.Background(), func(context.Context) error { return stage.ErrSuspend })
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans ended before Resume", n)
	}
	boom := errors.New("boom")
	if err := sp.Resume(boom); err != boom {
		t.Fatalf("Resume = %v", err)
	}
	spans := sr.Ended()
	if len(spans) != 2 || spans[0].Name() != "watertight llm attempt" || spans[1].Name() != "watertight llm" {
		t.Fatalf("spans %v", spans)
	}
	for _, s := range spans {
		if s.Status().Code != codes.Error {
			t.Errorf("span %q status %v, want an error", s.Name(), s.Status())
		}
	}
}

// Only a pipeline of Stages and Repeaters can suspend; ErrSuspend under
// Execute is an error like any other.
func TestSuspenderOf(t *testing.T) {
	plain, _ := compose.New("x", compose.Policies{Bulkhead: &fakeStage{name: "b"}, Breaker: &wrapPolicy{name: "w", j: &journal{}}})
	empty, _ := compose.New("x", compose.Policies{})
	for _, tt := range []struct {
		name string
		p    policy.Policy
		want bool
	}{
		{"stages", func() *compose.Pipeline { p, _ := compose.New("x", stages(nil)); return p }(), true},
		{"empty", empty, true},
		{"closure", plain, false},
		{"not a pipeline", &fakeStage{name: "b"}, false},
	} {
		if got := stage.SuspenderOf(tt.p) != nil; got != tt.want {
			t.Errorf("%s: suspends %v, want %v", tt.name, got, tt.want)
		}
	}
	p, _ := compose.New("x", stages(nil))
	if err := p.Execute(context.Background(), func(context.Context) error { return stage.ErrSuspend }); err != stage.ErrSuspend {
		t.Errorf("Execute = %v, want ErrSuspend as fn's error", err)
	}
}

// A call that is not suspended allocates no more than under Execute (the
// fake repeater's attempt context is the one allocation of both); a
// suspended one allocates its frames, once.
func TestSuspendableAllocatesNothing(t *testing.T) {
	p, _ := compose.New("x", stages(nil))
	s := suspender(t, p)
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	base := testing.AllocsPerRun(1000, func() { p.Execute(ctx, fn) })
	// fn as an Attempter: a pointer, which an interface holds without
	// allocating, as httppolicy's exchange.
	afn := &attempter{fn}
	if n := testing.AllocsPerRun(1000, func() { s.s.ExecuteSuspendable(ctx, afn) }); n != base {
		t.Errorf("%v allocations per call, want %v as Execute", n, base)
	}
	susp := &attempter{func(context.Context) error { return stage.ErrSuspend }}
	if n := testing.AllocsPerRun(1000, func() {
		sp, _ := s.s.ExecuteSuspendable(ctx, susp)
		sp.Resume(nil)
	}); n != base+1 {
		t.Errorf("%v allocations per suspended call, want %v", n, base+1)
	}
}

type attempter struct{ fn func(context.Context) error }

func (a *attempter) Attempt(ctx context.Context) error { return a.fn(ctx) }
