package policy_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/watertight/watertight/policy"
)

var errFake = policy.NewSentinel("fake: refused")

func TestRejectedErrorMatches(t *testing.T) {
	rej := policy.NewRejectedError("fake", "db", "full", errFake)
	var err error = fmt.Errorf("call: %w", rej)
	if !errors.Is(err, policy.ErrRejected) {
		t.Error("wrapped RejectedError does not match ErrRejected")
	}
	if !errors.Is(err, errFake) {
		t.Error("wrapped RejectedError does not match its sentinel")
	}
	if !errors.Is(errFake, policy.ErrRejected) {
		t.Error("sentinel does not match ErrRejected")
	}
	var got *policy.RejectedError
	if !errors.As(err, &got) || got.Kind != "fake" || got.Name != "db" || got.Reason != "full" {
		t.Errorf("errors.As gave %+v", got)
	}
	if errors.Is(err, context.Canceled) || errors.Is(policy.NewRejectedError("a", "b", "c", nil), errFake) {
		t.Error("RejectedError matches an unrelated error")
	}
	if errors.Is(errors.New("other"), policy.ErrRejected) {
		t.Error("plain error matches ErrRejected")
	}
}

func TestRejectedErrorMessage(t *testing.T) {
	tests := []struct {
		err  *policy.RejectedError
		want string
	}{
		{policy.NewRejectedError("bulkhead", "llm", "full", nil), `bulkhead "llm" rejected the call: full`},
		{&policy.RejectedError{Kind: "breaker", Reason: "open"}, `breaker rejected the call: open`},
		{&policy.RejectedError{}, `policy rejected the call`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, policy.ErrRejected) {
			t.Errorf("%q does not match ErrRejected", tt.want)
		}
	}
}

// recStage is a Stage that records Enter and Exit calls.
type recStage struct {
	mu     sync.Mutex
	log    []string
	reject error
}

type ctxKey struct{}

func (s *recStage) Execute(ctx context.Context, fn policy.Func) error { return policy.Run(ctx, s, fn) }

func (s *recStage) Enter(ctx context.Context) (context.Context, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "enter")
	if s.reject != nil {
		return nil, nil, s.reject
	}
	return context.WithValue(ctx, ctxKey{}, "inner"), s, nil
}

func (s *recStage) Exit(ctx context.Context, token any, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token != s || ctx.Value(ctxKey{}) != "inner" {
		s.log = append(s.log, "bad exit")
	}
	s.log = append(s.log, fmt.Sprintf("exit %v", err))
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	return nil
}

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	t.Run("success", func(t *testing.T) {
		s := &recStage{}
		err := policy.Run(context.Background(), s, func(ctx context.Context) error {
			if ctx.Value(ctxKey{}) != "inner" {
				t.Error("fn did not get Enter's context")
			}
			return nil
		})
		if err != nil || strings.Join(s.log, ",") != "enter,exit <nil>" {
			t.Errorf("err=%v log=%v", err, s.log)
		}
	})
	t.Run("error goes through Exit", func(t *testing.T) {
		s := &recStage{}
		err := policy.Run(context.Background(), s, func(context.Context) error { return boom })
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "stage: ") {
			t.Errorf("err=%v", err)
		}
	})
	t.Run("rejected at Enter", func(t *testing.T) {
		s := &recStage{reject: errFake}
		ran := false
		err := policy.Run(context.Background(), s, func(context.Context) error { ran = true; return nil })
		if err != errFake || ran || strings.Join(s.log, ",") != "enter" {
			t.Errorf("err=%v ran=%v log=%v", err, ran, s.log)
		}
	})
	t.Run("panic exits with ErrAborted", func(t *testing.T) {
		s := &recStage{}
		func() {
			defer func() {
				if r := recover(); r != "kaboom" {
					t.Errorf("recovered %v, want the original panic", r)
				}
			}()
			policy.Run(context.Background(), s, func(context.Context) error { panic("kaboom") })
		}()
		if strings.Join(s.log, ",") != "enter,exit "+policy.ErrAborted.Error() {
			t.Errorf("log=%v", s.log)
		}
	})
	t.Run("Goexit exits with ErrAborted", func(t *testing.T) {
		s := &recStage{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			policy.Run(context.Background(), s, func(context.Context) error { runtime.Goexit(); return nil })
		}()
		<-done
		if strings.Join(s.log, ",") != "enter,exit "+policy.ErrAborted.Error() {
			t.Errorf("log=%v", s.log)
		}
	})
}

// countRepeater retries up to max attempts with no wait.
type countRepeater struct{ max int }

type attemptKey struct{}

func (r countRepeater) Execute(ctx context.Context, fn policy.Func) error {
	return policy.Repeat(ctx, r, fn)
}
func (r countRepeater) AttemptContext(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}
func (r countRepeater) Next(ctx context.Context, n int, err error, state any) (bool, any, error) {
	prev, _ := state.(int)
	if prev != n-1 {
		return false, nil, fmt.Errorf("state %d after attempt %d", prev, n)
	}
	if n >= r.max {
		return false, nil, fmt.Errorf("gave up: %w", err)
	}
	return true, n, nil
}

func TestRepeat(t *testing.T) {
	boom := errors.New("boom")
	var seen []int
	err := policy.Repeat(context.Background(), countRepeater{max: 3}, func(ctx context.Context) error {
		seen = append(seen, ctx.Value(attemptKey{}).(int))
		return boom
	})
	if !errors.Is(err, boom) || fmt.Sprint(seen) != "[1 2 3]" {
		t.Errorf("err=%v seen=%v", err, seen)
	}
	seen = nil
	err = policy.Repeat(context.Background(), countRepeater{max: 3}, func(ctx context.Context) error {
		seen = append(seen, ctx.Value(attemptKey{}).(int))
		if len(seen) < 2 {
			return boom
		}
		return nil
	})
	if err != nil || fmt.Sprint(seen) != "[1 2]" {
		t.Errorf("err=%v seen=%v", err, seen)
	}
}

func TestNilPanics(t *testing.T) {
	fn := func(context.Context) error { return nil }
	tests := []struct {
		name string
		call func()
	}{
		{"Run nil ctx", func() { policy.Run(nil, &recStage{}, fn) }}, //nolint:staticcheck
		{"Run nil fn", func() { policy.Run(context.Background(), &recStage{}, nil) }},
		{"Repeat nil ctx", func() { policy.Repeat(nil, countRepeater{1}, fn) }}, //nolint:staticcheck
		{"Repeat nil fn", func() { policy.Repeat(context.Background(), countRepeater{1}, nil) }},
		{"Do nil fn", func() { policy.Do[int](context.Background(), &recStage{}, nil) }},
		{"Do nil Policy", func() {
			policy.Do(context.Background(), nil, func(context.Context) (int, error) { return 0, nil })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "policy: ") {
					t.Errorf("panic %v, want a message starting with \"policy: \"", r)
				}
			}()
			tt.call()
		})
	}
}

// fallback turns a failed first attempt into success and a successful
// second into failure: Do must not return the first attempt's value.
type fallback struct{}

func (fallback) Execute(ctx context.Context, fn policy.Func) error {
	fn(ctx) // the first attempt's error is ignored: "fallback"
	if err := fn(ctx); err == nil {
		return errors.New("second attempt rejected by a strict policy")
	}
	return nil
}

func TestDoClearsEarlierValue(t *testing.T) {
	n := 0
	v, err := policy.Do(context.Background(), fallback{}, func(context.Context) (string, error) {
		n++
		if n == 1 {
			return "first", nil
		}
		return "second", errors.New("boom")
	})
	if err != nil || v != "" {
		t.Errorf("Do = %q, %v; want the zero value: no attempt that the policy accepted succeeded", v, err)
	}
}

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	// A failed attempt's value must not leak into the result of a later
	// successful one, nor be returned with an error.
	calls := 0
	v, err := policy.Do(context.Background(), countRepeater{max: 3}, func(ctx context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "partial", boom
		}
		return "whole", nil
	})
	if err != nil || v != "whole" {
		t.Errorf("Do = %q, %v", v, err)
	}
	v, err = policy.Do(context.Background(), countRepeater{max: 1}, func(ctx context.Context) (string, error) {
		return "partial", boom
	})
	if !errors.Is(err, boom) || v != "" {
		t.Errorf("Do = %q, %v; want zero value and boom", v, err)
	}
}
