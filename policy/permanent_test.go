package policy_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/policy"
)

var errBoom = errors.New("boom")

type causeError struct{}

func (*causeError) Error() string { return "cause" }

// The marker is policy's own: it has the marked error's message, errors.Is
// and errors.As see through it, and it is no type of backoff's.
func TestPermanentMarker(t *testing.T) {
	cause := &causeError{}
	p := policy.Permanent(cause)
	if p.Error() != cause.Error() || !errors.Is(p, cause) {
		t.Errorf("policy.Permanent(cause) = %q, Is cause %v", p, errors.Is(p, cause))
	}
	if got, ok := errors.AsType[*causeError](p); !ok || got != cause {
		t.Errorf("errors.As through the marker = %v, %v", got, ok)
	}
	if _, ok := errors.AsType[*backoff.PermanentError](p); ok {
		t.Error("the marker is a *backoff.PermanentError")
	}
	if policy.Permanent(p) != p {
		t.Error("policy.Permanent(policy.Permanent(err)) is a second marker")
	}
	if !policy.IsPermanent(fmt.Errorf("a: %w", fmt.Errorf("b: %w", p))) || policy.IsPermanent(cause) {
		t.Error("IsPermanent does not find the marker deep in the chain, or finds one where there is none")
	}
}

func TestUnmark(t *testing.T) {
	wrapped := fmt.Errorf("op: %w", policy.Permanent(errBoom))
	empty := &backoff.PermanentError{}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"plain", errBoom, errBoom},
		{"marker", policy.Permanent(errBoom), errBoom},
		{"marker deeper in the chain", wrapped, wrapped},
		{"backoff marker", backoff.Permanent(errBoom), errBoom},
		{"backoff marker around retry's", backoff.Permanent(policy.Permanent(errBoom)), errBoom},
		{"backoff marker around nothing", empty, empty},
	}
	for _, tt := range tests {
		if got := policy.Unmark(tt.err); !sameOrSettled(got, tt.want) {
			t.Errorf("%s: Unmark = %#v, want %#v", tt.name, got, tt.want)
		}
	}
}

// sameOrSettled reports whether got is want itself or, for a want with a
// marker deeper in its chain, want settled: matching it with errors.Is,
// with its message, and honoured by no retry.
func sameOrSettled(got, want error) bool {
	if got == want {
		return true
	}
	return policy.IsPermanent(want) && errors.Is(got, want) && got.Error() == want.Error() && !policy.IsPermanent(got)
}
