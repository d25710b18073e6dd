package bench

import (
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/watertight/watertight/adaptive"
)

// BenchmarkAdaptive: the adaptive limiter's success path, alone, against
// failsafe-go's adaptivelimiter at its defaults. Its target is the static
// bulkhead's cost plus Floor/op=2xNow (the two clock reads that time fn)
// plus 60 ns.
func BenchmarkAdaptive(b *testing.B) {
	b.Run("lib=watertight", func(b *testing.B) {
		l, err := adaptive.New(adaptive.Config{Name: "a", MaxLimit: bigLimit, InitialLimit: bigLimit})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		seq(b, nil, func() error { return l.Execute(bg, work) })
	})
	b.Run("lib=failsafe", func(b *testing.B) {
		ex := fsExec(adaptivelimiter.NewBuilder[any]().Build())
		seq(b, nil, func() error { return ex.RunWithExecution(fsWork) })
	})
}
