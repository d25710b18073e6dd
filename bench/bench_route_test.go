package bench

import (
	"fmt"
	"testing"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/route"
)

// wtRouter returns a route.Router over n endpoints with no policies of
// their own, route.Config defaults otherwise (telemetry: the global
// providers, no-op unless set).
func wtRouter(tb testing.TB, n int) *route.Router {
	eps := make([]route.Endpoint, n)
	for i := range eps {
		eps[i] = route.Endpoint{Name: fmt.Sprintf("ep%d", i)}
	}
	r := must[*route.Router](tb)(route.New(route.Config{Name: "r", Endpoints: eps}))
	tb.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkRoute is the bookkeeping of one attempt routed among 8
// endpoints: Router.Pick, the work with the context it returns, then
// Permit.Done(nil), on the success path. (The route package's
// BenchmarkPick times the choice alone.) op=bare is the work called
// directly, for reference; op=pick8-parallel is op=pick8 from 32 x
// GOMAXPROCS goroutines sharing the router.
func BenchmarkRoute(b *testing.B) {
	b.Run("op=bare", func(b *testing.B) {
		seq(b, nil, func() error { return work(bg) })
	})
	pick := func(r *route.Router) func() error {
		return func() error {
			ctx, p, err := r.Pick(bg, 0, 0)
			if err != nil {
				return err
			}
			return p.Done(work(ctx))
		}
	}
	b.Run("op=pick8", func(b *testing.B) {
		seq(b, nil, pick(wtRouter(b, 8)))
	})
	b.Run("op=pick8-parallel", func(b *testing.B) {
		par(b, pick(wtRouter(b, 8)))
	})
}

// BenchmarkRouted is a call through a compose pipeline with a Retry alone
// (route=none; the Retry of the other benchmarks: 3 attempts, no wait)
// against the same pipeline with a Route of 1 endpoint without policies
// (route=1ep), on the success path (the target: at most 300 ns
// more).
func BenchmarkRouted(b *testing.B) {
	b.Run("route=none", func(b *testing.B) {
		p := must[*compose.Pipeline](b)(compose.New("p", compose.Policies{Retry: wtRetry(b, nil)}))
		seq(b, nil, func() error { return p.Execute(bg, work) })
	})
	b.Run("route=1ep", func(b *testing.B) {
		p := must[*compose.Pipeline](b)(compose.New("p", compose.Policies{Retry: wtRetry(b, nil), Route: wtRouter(b, 1)}))
		seq(b, nil, func() error { return p.Execute(bg, work) })
	})
}
