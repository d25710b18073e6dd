package statuspage_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/statuspage"
)

func benchPipelines(b *testing.B, n int) []statuspage.Pipeline {
	var ps []statuspage.Pipeline
	for i := range n {
		p, err := watertight.New("p"+string(rune('a'+i%26))+string(rune('a'+i/26)), watertight.Config{
			Bulkhead: &bulkhead.Config{Limit: 10}, Retry: &retry.Config{}, Breaker: &breaker.Config{}, Attempt: &deadline.Config{Timeout: time.Second},
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		ps = append(ps, p)
	}
	return ps
}

// BenchmarkRender renders the HTML page of 50 pipelines.
func BenchmarkRender(b *testing.B) {
	pg, err := statuspage.New(statuspage.Options{Pipelines: benchPipelines(b, 50)})
	if err != nil {
		b.Fatal(err)
	}
	defer pg.Close()
	req := httptest.NewRequest("GET", "/", nil)
	for b.Loop() {
		w := httptest.NewRecorder()
		pg.ServeHTTP(w, req)
	}
}

// BenchmarkCall runs calls through one of 50 pipelines from every
// processor: with no page; with a page of them rendered over and over
// meanwhile; and, as the control that pays the same processor time, with
// a page of 50 other pipelines rendered over and over.
func BenchmarkCall(b *testing.B) {
	for _, mode := range []string{"page=none", "page=others", "page=rendering"} {
		b.Run(mode, func(b *testing.B) {
			ps := benchPipelines(b, 50)
			p := ps[0].(*watertight.Pipeline)
			shown := ps
			if mode == "page=others" {
				shown = benchPipelines(b, 50)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			if mode != "page=none" {
				pg, err := statuspage.New(statuspage.Options{Pipelines: shown})
				if err != nil {
					b.Fatal(err)
				}
				defer pg.Close()
				go func() {
					defer close(done)
					for {
						select {
						case <-stop:
							return
						default:
						}
						pg.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
					}
				}()
			} else {
				close(done)
			}
			fn := func(context.Context) error { return nil }
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p.Execute(context.Background(), fn)
				}
			})
			b.StopTimer()
			close(stop)
			<-done
		})
	}
}
