package policy_test

import (
	"context"
	"testing"

	"github.com/watertight/watertight/policy"
)

type benchKey int

// Do's success path once a hedge exists in the process (a Claimer has been
// put in a context somewhere), from an 8-deep context, with a policy that
// says it never hedges (serial: no claim lookup) and one that does not say
// (direct: Do looks for a claim through the whole chain), beside Execute
// with the same work: `benchstat -col /policy`.
func BenchmarkDoClaim(b *testing.B) {
	policy.WithClaimer(context.Background(), raceClaim{new(raceCall), 1}) // a hedge exists
	ctx := context.Background()
	for i := range 8 {
		ctx = context.WithValue(ctx, benchKey(i), i)
	}
	for _, tc := range []struct {
		name string
		p    policy.Policy
	}{{"serial", serial{}}, {"direct", direct{}}} {
		b.Run("policy="+tc.name, func(b *testing.B) {
			var v int
			b.ReportAllocs()
			for b.Loop() {
				v, _ = policy.Do(ctx, tc.p, func(context.Context) (int, error) { return 1, nil })
			}
			_ = v
		})
	}
}
