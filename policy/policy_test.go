package policy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// repeat runs fn up to max times until it succeeds, as a retry would.
type repeat struct{ max int }

func (r repeat) Execute(ctx context.Context, fn policy.Func) error {
	var err error
	for n := 0; n < r.max; n++ {
		if err = fn(ctx); err == nil {
			return nil
		}
	}
	return fmt.Errorf("gave up: %w", err)
}

type okPolicy struct{}

func (okPolicy) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

func TestNilPanics(t *testing.T) {
	tests := []struct {
		name string
		call func()
	}{
		{"Do nil fn", func() { policy.Do[int](context.Background(), okPolicy{}, nil) }},
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
	v, err := policy.Do(context.Background(), repeat{max: 3}, func(ctx context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "partial", boom
		}
		return "whole", nil
	})
	if err != nil || v != "whole" {
		t.Errorf("Do = %q, %v", v, err)
	}
	v, err = policy.Do(context.Background(), repeat{max: 1}, func(ctx context.Context) (string, error) {
		return "partial", boom
	})
	if !errors.Is(err, boom) || v != "" {
		t.Errorf("Do = %q, %v; want zero value and boom", v, err)
	}
}
