package compose_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/policy"
)

func stages(j *journal) compose.Policies {
	return compose.Policies{
		Bulkhead: &fakeStage{name: "bulkhead", j: j},
		Deadline: &fakeStage{name: "deadline", j: j},
		Retry:    &fakeRepeater{max: 2, j: j},
		Breaker:  &fakeStage{name: "breaker", j: j},
		Attempt:  &fakeStage{name: "attempt", j: j},
	}
}

func TestOrder(t *testing.T) {
	j := &journal{}
	p, err := compose.New("llm", stages(j))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = p.Execute(context.Background(), func(ctx context.Context) error {
		j.add("fn %d", ctx.Value(attemptKey{}))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	want := "[enter bulkhead enter deadline " +
		"attempt 1 enter breaker enter attempt fn 1 exit attempt boom exit breaker boom " +
		"attempt 2 enter breaker enter attempt fn 2 exit attempt boom exit breaker boom " +
		"exit deadline boom exit bulkhead boom]"
	if got := j.String(); got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
}

func TestNilSlotsSkipped(t *testing.T) {
	j := &journal{}
	p, err := compose.New("x", compose.Policies{Breaker: &fakeStage{name: "breaker", j: j}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Execute(context.Background(), func(context.Context) error { j.add("fn"); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := j.String(); got != "[enter breaker fn exit breaker <nil>]" {
		t.Errorf("got %s", got)
	}
	empty, err := compose.New("empty", compose.Policies{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := empty.Execute(context.Background(), func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("empty pipeline: err=%v ran=%v", err, ran)
	}
}

// Any slot takes an Execute-only policy; the call still goes through every
// slot in order.
func TestPlainPolicies(t *testing.T) {
	j := &journal{}
	p, err := compose.New("plain", compose.Policies{
		Bulkhead: &wrapPolicy{name: "bulkhead", j: j},
		Deadline: &fakeStage{name: "deadline", j: j},
		Retry:    &wrapPolicy{name: "retry", j: j},
		Breaker:  &wrapPolicy{name: "breaker", j: j},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Execute(context.Background(), func(ctx context.Context) error {
		j.add("fn in %v", ctx.Value(nameKey{}))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[before bulkhead enter deadline before retry before breaker fn in breaker " +
		"after breaker <nil> after retry <nil> exit deadline <nil> after bulkhead <nil>]"
	if got := j.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestRejectionStopsAtOnce(t *testing.T) {
	j := &journal{}
	reject := policy.NewRejectedError("fake", "b", "full", nil)
	ps := stages(j)
	ps.Bulkhead = &fakeStage{name: "bulkhead", j: j, reject: reject}
	p, _ := compose.New("x", ps)
	ran := false
	err := p.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
	if err != reject || ran {
		t.Fatalf("err=%v ran=%v", err, ran)
	}
	if got := j.String(); got != "[enter bulkhead]" {
		t.Errorf("a rejected call went further: %s", got)
	}
}

func TestPanicFreesEveryStage(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Errorf("recovered %v", r)
			}
		}()
		p.Execute(context.Background(), func(context.Context) error { panic("kaboom") })
	}()
	ab := errAborted.Error()
	want := "[enter bulkhead enter deadline attempt 1 enter breaker enter attempt " +
		"exit attempt " + ab + " exit breaker " + ab + " exit deadline " + ab + " exit bulkhead " + ab + "]"
	if got := j.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestGoexitFreesEveryStage(t *testing.T) {
	j := &journal{}
	p, _ := compose.New("x", stages(j))
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Execute(context.Background(), func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-done
	if got := j.String(); strings.Count(got, "exit ") != 4 || strings.Count(got, errAborted.Error()) != 4 {
		t.Errorf("not every stage exited with ErrAborted: %s", got)
	}
}

type timed struct {
	fakeStage
	d time.Duration
}

func (t *timed) Timeout() time.Duration { return t.d }

func TestNewErrors(t *testing.T) {
	var nilStage *fakeStage
	tests := []struct {
		name string
		pipe string
		p    compose.Policies
		want string
	}{
		{"empty name", "", compose.Policies{}, "compose: name must not be empty"},
		{"typed nil", "x", compose.Policies{Breaker: nilStage}, "Policies.Breaker is a nil *compose_test.fakeStage"},
		{"attempt longer than deadline", "x", compose.Policies{
			Deadline: &timed{d: time.Second}, Attempt: &timed{d: 2 * time.Second},
		}, "Policies.Attempt timeout 2s is longer than Policies.Deadline timeout 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compose.New(tt.pipe, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "compose: ") {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	if _, err := compose.New("x", compose.Policies{Deadline: &timed{d: time.Second}, Attempt: &timed{d: time.Second}}); err != nil {
		t.Errorf("equal timeouts rejected: %v", err)
	}
	// A Deadline of timeout 0 imposes none: any Attempt timeout fits.
	if _, err := compose.New("x", compose.Policies{Deadline: &timed{}, Attempt: &timed{d: time.Second}}); err != nil {
		t.Errorf("attempt under a zero deadline rejected: %v", err)
	}
}

func TestNilPanics(t *testing.T) {
	p, _ := compose.New("x", compose.Policies{})
	for name, call := range map[string]func(){
		"nil ctx": func() { p.Execute(nil, func(context.Context) error { return nil }) }, //nolint:staticcheck
		"nil fn":  func() { p.Execute(context.Background(), nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r, _ := recover().(string); !strings.HasPrefix(r, "compose: nil") {
					t.Errorf("panic %q", r)
				}
			}()
			call()
		})
	}
}

// With no SDK installed, a pipeline of this module's policies allocates
// nothing of compose's per call: no span is started, no clock read, no
// closure built.
func TestNoTelemetryAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	bh, err := bulkhead.New(bulkhead.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := compose.New("x", compose.Policies{Bulkhead: bh})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	if n := testing.AllocsPerRun(1000, func() { p.Execute(ctx, fn) }); n != 0 {
		t.Errorf("allocs per call = %v, want 0", n)
	}
	// A rejection allocates nothing either.
	held, _ := bh.Acquire(ctx)
	for range 3 {
		bh.Acquire(ctx)
	}
	if n := testing.AllocsPerRun(1000, func() { p.Execute(ctx, fn) }); n != 0 {
		t.Errorf("allocs per rejected call = %v, want 0", n)
	}
	held.Release()
}
