package stage_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

var errFake = policy.NewSentinel("fake: refused")

// recStage is a Stage that records Enter and Exit calls.
type recStage struct {
	mu     sync.Mutex
	log    []string
	reject error
}

type ctxKey struct{}

func (s *recStage) Execute(ctx context.Context, fn policy.Func) error { return stage.Run(ctx, s, fn) }

func (s *recStage) Enter(ctx context.Context) (context.Context, stage.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "enter")
	if s.reject != nil {
		return nil, nil, s.reject
	}
	return context.WithValue(ctx, ctxKey{}, "inner"), s, nil
}

func (s *recStage) Exit(ctx context.Context, token stage.Token, err error) error {
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
		err := stage.Run(context.Background(), s, func(ctx context.Context) error {
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
		err := stage.Run(context.Background(), s, func(context.Context) error { return boom })
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "stage: ") {
			t.Errorf("err=%v", err)
		}
	})
	t.Run("rejected at Enter", func(t *testing.T) {
		s := &recStage{reject: errFake}
		ran := false
		err := stage.Run(context.Background(), s, func(context.Context) error { ran = true; return nil })
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
			stage.Run(context.Background(), s, func(context.Context) error { panic("kaboom") })
		}()
		if strings.Join(s.log, ",") != "enter,exit "+stage.ErrAborted.Error() {
			t.Errorf("log=%v", s.log)
		}
	})
	t.Run("Goexit exits with ErrAborted", func(t *testing.T) {
		s := &recStage{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			stage.Run(context.Background(), s, func(context.Context) error { runtime.Goexit(); return nil })
		}()
		<-done
		if strings.Join(s.log, ",") != "enter,exit "+stage.ErrAborted.Error() {
			t.Errorf("log=%v", s.log)
		}
	})
}

// countRepeater retries up to max attempts with no wait.
type countRepeater struct{ max int }

type attemptKey struct{}

func (r countRepeater) Execute(ctx context.Context, fn policy.Func) error {
	return stage.Repeat(ctx, r, fn)
}
func (r countRepeater) AttemptContext(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}
func (r countRepeater) Next(ctx context.Context, n int, err error, state stage.Token) (bool, stage.Token, error) {
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
	err := stage.Repeat(context.Background(), countRepeater{max: 3}, func(ctx context.Context) error {
		seen = append(seen, ctx.Value(attemptKey{}).(int))
		return boom
	})
	if !errors.Is(err, boom) || fmt.Sprint(seen) != "[1 2 3]" {
		t.Errorf("err=%v seen=%v", err, seen)
	}
	seen = nil
	err = stage.Repeat(context.Background(), countRepeater{max: 3}, func(ctx context.Context) error {
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
		{"Run nil ctx", func() { stage.Run(nil, &recStage{}, fn) }}, //nolint:staticcheck
		{"Run nil fn", func() { stage.Run(context.Background(), &recStage{}, nil) }},
		{"Repeat nil ctx", func() { stage.Repeat(nil, countRepeater{1}, fn) }}, //nolint:staticcheck
		{"Repeat nil fn", func() { stage.Repeat(context.Background(), countRepeater{1}, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "stage: ") {
					t.Errorf("panic %v, want a message starting with \"stage: \"", r)
				}
			}()
			tt.call()
		})
	}
}
