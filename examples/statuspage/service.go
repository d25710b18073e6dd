package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
	"github.com/watertight/watertight/statuspage"
)

// PagePath is where [Service.Handler] mounts the status page.
const PagePath = "/debug/watertight"

var errUpstream = errors.New("upstream: 503 Service Unavailable")

// Upstream is a fake dependency: a call takes about its latency and fails
// with its failure rate, or always while it is down. It is safe for
// concurrent use.
type Upstream struct {
	latency  time.Duration
	failRate float64
	down     atomic.Bool
}

// Call waits the upstream's latency, give or take a half, or until ctx is
// done, and then fails or succeeds.
func (u *Upstream) Call(ctx context.Context) error {
	t := time.NewTimer(u.latency/2 + rand.N(u.latency+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if u.down.Load() || rand.Float64() < u.failRate {
		return errUpstream
	}
	return nil
}

// Service is the example's service: three pipelines over fake upstreams,
// and the status page of those pipelines. Build it with [NewService] and
// Close it when done.
type Service struct {
	Chat   *watertight.Pipeline // bulkhead, retry, rate limit, breaker, attempt timeout
	Login  *watertight.Pipeline // bulkhead only
	Search *watertight.Pipeline // routed over the endpoints eu and us
	Page   *statuspage.Page

	chat, login *Upstream
	search      map[string]*Upstream // by endpoint name
}

// NewService builds the pipelines and the page over them.
func NewService() (_ *Service, err error) {
	s := &Service{
		chat:  &Upstream{latency: 30 * time.Millisecond, failRate: 0.02},
		login: &Upstream{latency: 10 * time.Millisecond},
		search: map[string]*Upstream{
			"eu": {latency: 40 * time.Millisecond, failRate: 0.01},
			"us": {latency: 15 * time.Millisecond},
		},
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Chat, err = watertight.New("chat", watertight.Config{
		Bulkhead:  &bulkhead.Config{Limit: 4, MaxQueue: 8, MaxWait: time.Second},
		Retry:     &retry.Config{MaxAttempts: 3, InitialInterval: 20 * time.Millisecond, MaxInterval: 200 * time.Millisecond},
		RateLimit: &ratelimit.Config{RequestsPerSecond: 100, Burst: 20, MaxWait: 100 * time.Millisecond},
		Breaker:   &breaker.Config{ConsecutiveFailures: 5, OpenTimeout: 30 * time.Second},
		Attempt:   &deadline.Config{Timeout: 200 * time.Millisecond},
	})
	if err != nil {
		return nil, err
	}
	s.Login, err = watertight.New("login", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 2},
	})
	if err != nil {
		return nil, err
	}
	// Each endpoint gets a breaker and an attempt timeout of its own,
	// built from the Breaker and Attempt sections.
	s.Search, err = watertight.New("search", watertight.Config{
		Retry:   &retry.Config{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond},
		Breaker: &breaker.Config{ConsecutiveFailures: 3},
		Attempt: &deadline.Config{Timeout: 300 * time.Millisecond},
		Route:   &route.Config{Endpoints: []route.Endpoint{{Name: "eu"}, {Name: "us"}}},
	})
	if err != nil {
		return nil, err
	}
	s.Page, err = statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{s.Chat, s.Login, s.Search}})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops the page's sampling and closes the pipelines.
func (s *Service) Close() error {
	var errs []error
	if s.Page != nil {
		errs = append(errs, s.Page.Close())
	}
	for _, p := range []*watertight.Pipeline{s.Chat, s.Login, s.Search} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

// CallChat runs one call to the chat upstream through the chat pipeline.
func (s *Service) CallChat(ctx context.Context) error { return s.Chat.Execute(ctx, s.chat.Call) }

// CallLogin runs one call to the login upstream through the login pipeline.
func (s *Service) CallLogin(ctx context.Context) error { return s.Login.Execute(ctx, s.login.Call) }

// CallSearch runs one call through the search pipeline, to the upstream of
// the endpoint its router picked.
func (s *Service) CallSearch(ctx context.Context) error {
	return s.Search.Execute(ctx, func(ctx context.Context) error {
		ep, _ := route.EndpointOf(ctx)
		return s.search[ep.Name].Call(ctx)
	})
}

// Handler returns the service's routes: GET /chat, /login and /search run
// one call each, the status page is at [PagePath], / redirects to it, and
// /favicon.ico is empty.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /chat", callHandler(s.CallChat))
	mux.Handle("GET /login", callHandler(s.CallLogin))
	mux.Handle("GET /search", callHandler(s.CallSearch))
	// The page is read-only: AllowUpdates is off. A real service mounts it
	// behind its own authentication.
	mux.Handle(PagePath, s.Page)
	mux.Handle("GET /{$}", http.RedirectHandler(PagePath, http.StatusFound))
	// Browsers ask every site for an icon; without one, a 404 is logged
	// in the console of every page, the status page's included.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

// callHandler answers 200 when call succeeds, 503 when a policy rejected
// it, and 502 when the upstream failed.
func callHandler(call func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := call(r.Context())
		switch {
		case err == nil:
			fmt.Fprintln(w, "ok")
		case errors.Is(err, policy.ErrRejected):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	})
}

// Load sends a steady trickle of calls to every pipeline until ctx is
// done: 20 chat calls a second, 5 logins and 10 searches. It returns when
// its calls have returned.
func (s *Service) Load(ctx context.Context) {
	var wg sync.WaitGroup
	for _, l := range []struct {
		every time.Duration
		call  func(context.Context) error
	}{{50 * time.Millisecond, s.CallChat}, {200 * time.Millisecond, s.CallLogin}, {100 * time.Millisecond, s.CallSearch}} {
		wg.Go(func() {
			tick := time.NewTicker(l.every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					wg.Go(func() { l.call(ctx) })
				}
			}
		})
	}
	wg.Wait()
}

// stormCallers is the number of callers a storm runs: more than the chat
// bulkhead's 4 slots and 8 places in its queue.
const stormCallers = 16

// Storm takes the chat upstream down and sends it calls from 16 callers
// at once until ctx is done: the chat breaker opens on the 5th failure in
// a row, and while the failing calls retry, the bulkhead fills and
// rejects. Storm brings the upstream back up when its calls have
// returned.
func (s *Service) Storm(ctx context.Context) {
	s.chat.down.Store(true)
	defer s.chat.down.Store(false)
	var wg sync.WaitGroup
	for range stormCallers {
		wg.Go(func() {
			for ctx.Err() == nil {
				s.CallChat(ctx)
				// A rejection is fast: a pause keeps the callers from
				// spinning on it.
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
}
