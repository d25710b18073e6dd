package redisstate_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/redisstate"
)

// TestPipelineUse: a Budget in the Bulkhead slot and a SharedBreaker in the
// Breaker slot of a watertight pipeline (Config.Use), each run through its
// Execute: a full budget rejects, a panic gives the lease back and counts
// as a failure, and a trip on one replica's pipeline opens the other's.
func TestPipelineUse(t *testing.T) {
	s := startRedis(t)
	mk := func() (*watertight.Pipeline, *redisstate.Budget, *redisstate.SharedBreaker) {
		b := newBudget(t, redisstate.BudgetConfig{Name: "pipe", Limit: 1, Redis: patientRedis(newClient(t, s.Addr()))})
		br := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "pipe", ConsecutiveFailures: 2, OpenTimeout: time.Minute},
			Redis: patientRedis(newClient(t, s.Addr())), PollInterval: 20 * time.Millisecond})
		p, err := watertight.New("pipe", watertight.Config{Use: compose.Policies{Bulkhead: b, Breaker: br}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, b, br
	}
	a, ba, bra := mk()
	b, _, _ := mk()
	ctx := context.Background()

	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		a.Execute(ctx, func(context.Context) error { close(held); <-release; return nil })
		close(done)
	}()
	<-held
	if err := b.Execute(ctx, func(context.Context) error { return nil }); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("second replica while the only lease is held: %v", err)
	}
	close(release)
	<-done

	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic swallowed")
			}
		}()
		a.Execute(ctx, func(context.Context) error { panic("in fn") })
	}()
	if ba.InFlight() != 0 {
		t.Fatalf("%d in flight after a panic", ba.InFlight())
	}
	if c := bra.Breaker().Counts(); c.TotalFailures != 1 {
		t.Fatalf("a panic not counted as a failure: %+v", c)
	}
	if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("lease not given back after a panic: %v", err)
	}

	a.Execute(ctx, func(context.Context) error { return errBoom }) // the second failure in a row
	eventually(t, patience, "the other pipeline's breaker opens", func() bool {
		return errors.Is(b.Execute(ctx, func(context.Context) error { return nil }), breaker.ErrOpen)
	})
}

// TestTransportHoldsLease: through httppolicy's Transport, a pipeline
// with a Budget holds the lease until the response body ends, and the
// shared breaker counts the exchange only then.
func TestTransportHoldsLease(t *testing.T) {
	s := startRedis(t)
	c := newClient(t, s.Addr())
	b := newBudget(t, redisstate.BudgetConfig{Name: "http", Limit: 1, Redis: patientRedis(c)})
	br := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "http"}, Redis: patientRedis(newClient(t, s.Addr()))})
	p, err := compose.New("http", compose.Policies{Bulkhead: b, Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "body")
	}))
	defer srv.Close()
	client := &http.Client{Transport: &httppolicy.Transport{Policy: p}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if n := zcard(t, c, leasesKey("http")); n != 1 || b.InFlight() != 1 {
		t.Fatalf("body unread: %d leases, %d in flight", n, b.InFlight())
	}
	if got := br.Breaker().Counts(); got.TotalSuccesses != 0 {
		t.Fatalf("counted before the body ended: %+v", got)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := zcard(t, c, leasesKey("http")); n != 0 || b.InFlight() != 0 {
		t.Fatalf("body read: %d leases, %d in flight", n, b.InFlight())
	}
	if got := br.Breaker().Counts(); got.TotalSuccesses != 1 {
		t.Fatalf("after the body: %+v", got)
	}
}
