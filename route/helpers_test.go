package route_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/route"
)

// names returns n endpoints named e0, e1, ...
func names(n int) []route.Endpoint {
	eps := make([]route.Endpoint, n)
	for i := range eps {
		eps[i].Name = "e" + string(rune('0'+i))
	}
	return eps
}

func newRouter(t testing.TB, cfg route.Config) *route.Router {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "r"
	}
	r, err := route.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func pipeline(t testing.TB, p compose.Policies) *compose.Pipeline {
	t.Helper()
	pl, err := compose.New("p", p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// model is a dependency of several endpoints, each answering after its
// latency, with its error.
type model struct {
	mu      sync.Mutex
	latency []time.Duration
	err     []error
	hang    []bool
	calls   []int
}

func newModel(n int, latency time.Duration) *model {
	m := &model{latency: make([]time.Duration, n), err: make([]error, n), hang: make([]bool, n), calls: make([]int, n)}
	for i := range m.latency {
		m.latency[i] = latency
	}
	return m
}

func (m *model) set(i int, latency time.Duration, err error, hang bool) {
	m.mu.Lock()
	m.latency[i], m.err[i], m.hang[i] = latency, err, hang
	m.mu.Unlock()
}

// fn is the call: it answers as its endpoint does.
func (m *model) fn(ctx context.Context) error {
	ep, ok := route.EndpointOf(ctx)
	if !ok {
		panic("no endpoint")
	}
	m.mu.Lock()
	m.calls[ep.Index]++
	d, err, hang := m.latency[ep.Index], m.err[ep.Index], m.hang[ep.Index]
	m.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(d):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *model) counts() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.calls...)
}

func (m *model) reset() {
	m.mu.Lock()
	clear(m.calls)
	m.mu.Unlock()
}

// load runs calls at rate per second through p for d, each in its own
// goroutine, and waits for them all.
func load(ctx context.Context, p *compose.Pipeline, fn func(context.Context) error, rate int, d time.Duration) (errs int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	tick := time.Second / time.Duration(rate)
	for start := time.Now(); time.Since(start) < d; time.Sleep(tick) {
		wg.Go(func() {
			if err := p.Execute(ctx, fn); err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}
