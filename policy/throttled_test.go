package policy_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/watertight/watertight/policy"
)

// sdkRateLimit is a user's error type that reports a provider's 429 as
// throttled through an Is method.
type sdkRateLimit struct{ status int }

func (e *sdkRateLimit) Error() string { return fmt.Sprintf("sdk: status %d", e.status) }
func (e *sdkRateLimit) Is(target error) bool {
	return target == policy.ErrThrottled && e.status == 429
}

func TestErrThrottledIsNotARejection(t *testing.T) {
	if errors.Is(policy.ErrThrottled, policy.ErrRejected) {
		t.Error("ErrThrottled matches ErrRejected: fn ran, it is no rejection")
	}
	if errors.Is(policy.ErrRejected, policy.ErrThrottled) || errors.Is(policy.NewSentinel("x"), policy.ErrThrottled) {
		t.Error("a rejection matches ErrThrottled")
	}
	var err error = fmt.Errorf("call: %w", &sdkRateLimit{status: 429})
	if !errors.Is(err, policy.ErrThrottled) {
		t.Error("a user error whose Is says throttled does not match through a wrapper")
	}
	if errors.Is(&sdkRateLimit{status: 503}, policy.ErrThrottled) {
		t.Error("a 503 matches ErrThrottled")
	}
}
