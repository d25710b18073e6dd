package httppolicy

import (
	"context"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

type execFunc func(context.Context, policy.Func) error

func (f execFunc) Execute(ctx context.Context, fn policy.Func) error { return f(ctx, fn) }

type baseFunc func(*http.Request) (*http.Response, error)

func (f baseFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An adaptive limit samples an attempt up to its response headers: a
// stream answered in 10 ms and read for 500 ms is a 10 ms sample.
func TestAttemptSampleEndsAtTheResponseHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sample time.Duration
		pol := execFunc(func(ctx context.Context, fn policy.Func) error {
			ctx, a := stage.Begin(ctx, nil, false)
			err := fn(ctx)
			sample = a.End(time.Now())
			return err
		})
		base := baseFunc(func(req *http.Request) (*http.Response, error) {
			time.Sleep(10 * time.Millisecond)
			pr, pw := io.Pipe()
			go func() {
				time.Sleep(500 * time.Millisecond)
				pw.Write([]byte("x"))
				pw.Close()
			}()
			return &http.Response{StatusCode: 200, Body: pr, Request: req}, nil
		})
		req, _ := http.NewRequest("GET", "http://dep.test/", nil)
		resp, err := (&Transport{Base: base, Policy: pol}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if sample != 10*time.Millisecond {
			t.Fatalf("sample %v, want 10ms (the headers, not the stream)", sample)
		}
	})
}
