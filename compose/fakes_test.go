package compose_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/watertight/watertight/policy"
)

var raceEnabled bool

// journal records what the fake policies did, in order.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.log = append(j.log, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return fmt.Sprint(j.log)
}

type nameKey struct{}

// fakeStage is a two-phase policy that logs Enter and Exit and can reject.
type fakeStage struct {
	name   string
	j      *journal
	reject error
}

func (s *fakeStage) Execute(ctx context.Context, fn policy.Func) (err error) {
	inner, tok, err := s.Enter(ctx)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if !finished {
			s.Exit(inner, tok, errAborted)
		}
	}()
	err = fn(inner)
	finished = true
	return s.Exit(inner, tok, err)
}

// errAborted is what a fake's Exit sees when fn panicked.
var errAborted = errors.New("aborted")

func (s *fakeStage) Enter(ctx context.Context) (context.Context, any, error) {
	if s.j != nil {
		s.j.add("enter %s", s.name)
	}
	if s.reject != nil {
		return nil, nil, s.reject
	}
	return ctx, nil, nil
}

func (s *fakeStage) Exit(ctx context.Context, _ any, err error) error {
	if s.j != nil {
		s.j.add("exit %s %v", s.name, err)
	}
	return err
}

// wrapPolicy is a plain, Execute-only policy that logs around fn.
type wrapPolicy struct {
	name string
	j    *journal
}

func (w *wrapPolicy) Execute(ctx context.Context, fn policy.Func) error {
	w.j.add("before %s", w.name)
	err := fn(context.WithValue(ctx, nameKey{}, w.name))
	w.j.add("after %s %v", w.name, err)
	return err
}

// fakeRepeater retries up to max attempts, without waiting.
type fakeRepeater struct {
	max int
	j   *journal
}

type attemptKey struct{}

func (r *fakeRepeater) Execute(ctx context.Context, fn policy.Func) error {
	for n := 1; ; n++ {
		err := fn(r.AttemptContext(ctx, n))
		if err == nil {
			return nil
		}
		if again, _, final := r.Next(ctx, n, err, nil); !again {
			return final
		}
	}
}

func (r *fakeRepeater) AttemptContext(ctx context.Context, n int) context.Context {
	if r.j != nil {
		r.j.add("attempt %d", n)
	}
	return context.WithValue(ctx, attemptKey{}, n)
}

func (r *fakeRepeater) Next(ctx context.Context, n int, err error, state any) (bool, any, error) {
	if n >= r.max || ctx.Err() != nil {
		return false, nil, err
	}
	return true, nil, nil
}
