package nilcheck_test

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/watertight/watertight/internal/nilcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type stringer struct{}

func (*stringer) String() string { return "s" }

func TestPointer(t *testing.T) {
	var nilPtr *stringer
	var iface fmt.Stringer = nilPtr
	for _, tc := range []struct {
		name string
		v    any
		want bool
	}{
		{"nil interface", nil, false},
		{"nil pointer", nilPtr, true},
		{"nil pointer in an interface", iface, true},
		{"pointer", &stringer{}, false},
		{"value", 3, false},
		{"nil map (not a pointer)", map[string]int(nil), false},
		{"nil func (not a pointer)", (func())(nil), false},
	} {
		if got := nilcheck.Pointer(tc.v); got != tc.want {
			t.Errorf("%s: Pointer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func ExamplePointer() {
	var s *stringer
	var v fmt.Stringer = s
	fmt.Println(v == nil, nilcheck.Pointer(v))
	// Output: false true
}
