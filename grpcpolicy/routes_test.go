package grpcpolicy_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/grpcpolicy"
	"github.com/watertight/watertight/policy"
)

// A service-wide entry of Methods covers every method of the service; a
// method's own entry wins over it; other services get Policy.
func TestMethodsServiceKey(t *testing.T) {
	svcBH := newBulkhead(t, "svc", 1, 0)
	ownBH := newBulkhead(t, "own", 1, 0)
	defBH := newBulkhead(t, "def", 1, 0)
	c := newClient(t, grpcpolicy.ClientConfig{Policy: defBH, Methods: map[string]policy.Policy{"/wt.Test": svcBH, mSlow: ownBH}})
	for _, tc := range []struct {
		method string
		want   *bulkhead.Bulkhead
	}{{mCall, svcBH}, {mWatch, svcBH}, {mSlow, ownBH}, {"/other.Svc/Call", defBH}, {"/wt.Testing/Call", defBH}} {
		var active [3]int
		inv := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			active = [3]int{svcBH.Active(), ownBH.Active(), defBH.Active()}
			return nil
		}
		if err := c.UnaryInterceptor()(t.Context(), tc.method, nil, nil, nil, inv); err != nil {
			t.Fatal(err)
		}
		want := [3]int{}
		for i, b := range []*bulkhead.Bulkhead{svcBH, ownBH, defBH} {
			if b == tc.want {
				want[i] = 1
			}
		}
		if active != want {
			t.Errorf("%s: active (svc, own, default) = %v, want %v", tc.method, active, want)
		}
	}
}
