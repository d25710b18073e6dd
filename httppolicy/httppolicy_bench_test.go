package httppolicy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

func benchRoundTrip(b *testing.B, rt http.RoundTripper, url string) {
	b.ReportAllocs()
	req, _ := http.NewRequest("GET", url, nil)
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTransport compares a round trip over loopback through the full
// pipeline with the same round trip on the bare base transport.
func BenchmarkTransport(b *testing.B) {
	srv := newServer(b, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	b.Run("base", func(b *testing.B) {
		benchRoundTrip(b, newBase(b, 4), srv.URL)
	})
	b.Run("pipeline", func(b *testing.B) {
		tr := &httppolicy.Transport{Base: newBase(b, 4), Policy: newPipeline(b, compose.Policies{
			Bulkhead: newBulkhead(b, 4, 0), Deadline: newDeadline(b, time.Minute), Retry: newRetry(b, 3, nil),
			Breaker: newBreaker(b, 5),
		})}
		benchRoundTrip(b, tr, srv.URL)
	})
}

// BenchmarkTransportOverhead measures the Transport alone, on a base that
// answers from memory.
func BenchmarkTransportOverhead(b *testing.B) {
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
	})
	b.Run("base", func(b *testing.B) { benchRoundTrip(b, base, "http://dep.test/") })
	b.Run("pipeline", func(b *testing.B) {
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(b, compose.Policies{
			Bulkhead: newBulkhead(b, 4, 0), Deadline: newDeadline(b, time.Minute), Retry: newRetry(b, 3, nil),
			Breaker: newBreaker(b, 5),
		})}
		benchRoundTrip(b, tr, "http://dep.test/")
	})
	b.Run("pipeline_streamed_body", func(b *testing.B) {
		streamed := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Body: io.NopCloser(stringsReader("hello")), Request: req}, nil
		})
		tr := &httppolicy.Transport{Base: streamed, Policy: newPipeline(b, compose.Policies{
			Bulkhead: newBulkhead(b, 4, 0), Deadline: newDeadline(b, time.Minute), Retry: newRetry(b, 3, nil),
			Breaker: newBreaker(b, 5),
		})}
		benchRoundTrip(b, tr, "http://dep.test/")
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func BenchmarkHandler(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	run := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		req := httptest.NewRequest("GET", "/", nil)
		w := &bareWriter{h: http.Header{}}
		for b.Loop() {
			h.ServeHTTP(w, req)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, ok) })
	b.Run("pipeline", func(b *testing.B) {
		run(b, httppolicy.Handler(newPipeline(b, compose.Policies{
			Bulkhead: newBulkhead(b, 4, 0), Deadline: newDeadline(b, time.Minute), Breaker: newBreaker(b, 5),
		}), ok, httppolicy.HandlerConfig{}))
	})
}

func BenchmarkParseRetryAfter(b *testing.B) {
	now := time.Now()
	for _, h := range []struct {
		name string
		h    http.Header
	}{
		{"seconds", http.Header{"Retry-After": {"120"}}},
		{"date", http.Header{"Retry-After": {now.Add(time.Minute).UTC().Format(http.TimeFormat)}}},
		{"ms", http.Header{"Retry-After-Ms": {"12.5"}}},
	} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				httppolicy.ParseRetryAfter(h.h, now)
			}
		})
	}
}
