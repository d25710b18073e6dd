package httppolicy_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
)

func serve(h http.Handler, method string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
	return rec
}

func TestHandlerRejection(t *testing.T) {
	tests := []struct {
		name       string
		cfg        httppolicy.HandlerConfig
		wantCode   int
		wantHeader string
	}{
		{"default", httppolicy.HandlerConfig{}, 503, "1"},
		{"rounded up", httppolicy.HandlerConfig{RetryAfter: 1500 * time.Millisecond}, 503, "2"},
		{"whole seconds", httppolicy.HandlerConfig{RetryAfter: 30 * time.Second}, 503, "30"},
		{"negative", httppolicy.HandlerConfig{RetryAfter: -time.Second}, 503, "1"},
		{"OnReject", httppolicy.HandlerConfig{OnReject: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, policy.ErrRejected) {
				panic("OnReject given " + err.Error())
			}
			w.WriteHeader(http.StatusTooManyRequests)
		}}, 429, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bh := newBulkhead(t, 1, 0)
			entered, release := make(chan struct{}), make(chan struct{})
			var runs atomic.Int32
			h := httppolicy.Handler(newPipeline(t, compose.Policies{Bulkhead: bh}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					close(entered)
					<-release
				}
			}), tt.cfg)
			done := make(chan struct{})
			go func() { serve(h, "GET"); close(done) }()
			<-entered
			rec := serve(h, "GET")
			close(release)
			<-done
			if rec.Code != tt.wantCode || rec.Header().Get("Retry-After") != tt.wantHeader || runs.Load() != 1 {
				t.Fatalf("got %d Retry-After %q after %d runs", rec.Code, rec.Header().Get("Retry-After"), runs.Load())
			}
		})
	}
}

func TestHandlerDeadline(t *testing.T) {
	tests := []struct {
		name     string
		h        http.HandlerFunc
		wantCode int
		wantBody string
	}{
		{"nothing written: 504", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, 504, "Gateway Timeout\n"},
		{"already written: kept", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "partial")
			<-r.Context().Done()
		}, 200, "partial"},
		{"status written: kept", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			<-r.Context().Done()
		}, 202, ""},
		{"in time", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, 200, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := httppolicy.Handler(newPipeline(t, compose.Policies{Deadline: newDeadline(t, time.Second)}), tt.h, httppolicy.HandlerConfig{})
				rec := serve(h, "GET")
				if rec.Code != tt.wantCode || rec.Body.String() != tt.wantBody {
					t.Fatalf("got %d %q, want %d %q", rec.Code, rec.Body.String(), tt.wantCode, tt.wantBody)
				}
			})
		})
	}
}

func TestHandler5xxFeedsBreaker(t *testing.T) {
	tests := []struct {
		status   int
		wantOpen bool
	}{
		{500, true},
		{503, true},
		{404, false},
		{200, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			br := newBreaker(t, 1)
			var runs atomic.Int32
			h := httppolicy.Handler(newPipeline(t, compose.Policies{Breaker: br}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(tt.status)
				io.WriteString(w, "from handler")
			}), httppolicy.HandlerConfig{})
			rec := serve(h, "GET")
			if rec.Code != tt.status || rec.Body.String() != "from handler" {
				t.Fatalf("first: %d %q", rec.Code, rec.Body.String())
			}
			if (br.State() == breaker.Open) != tt.wantOpen {
				t.Fatalf("breaker %v", br.State())
			}
			rec = serve(h, "GET")
			if tt.wantOpen && (rec.Code != 503 || runs.Load() != 1) {
				t.Fatalf("open breaker: got %d after %d runs, want 503 after 1", rec.Code, runs.Load())
			}
		})
	}
}

func TestHandlerInformationalStatus(t *testing.T) {
	br := newBreaker(t, 1)
	h := httppolicy.Handler(newPipeline(t, compose.Policies{Breaker: br}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusInternalServerError)
	}), httppolicy.HandlerConfig{})
	serve(h, "GET")
	if br.State() != breaker.Open {
		t.Fatal("a 500 after a 103 was not counted")
	}
}

func TestHandlerNeverRerunByRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs, retries atomic.Int32
		h := httppolicy.Handler(newPipeline(t, compose.Policies{Retry: newRetry(t, 3, &retries)}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			http.Error(w, "boom", 500)
		}), httppolicy.HandlerConfig{})
		rec := serve(h, "POST")
		if rec.Code != 500 || runs.Load() != 1 || retries.Load() != 0 {
			t.Fatalf("got %d after %d runs, %d retries", rec.Code, runs.Load(), retries.Load())
		}
	})
}

// twicePolicy calls fn twice.
type twicePolicy struct{ second error }

func (p *twicePolicy) Execute(ctx context.Context, fn policy.Func) error {
	fn(ctx)
	p.second = fn(ctx)
	return nil
}

func TestHandlerRunsOnceUnderAnyPolicy(t *testing.T) {
	var runs atomic.Int32
	p := &twicePolicy{}
	h := httppolicy.Handler(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }), httppolicy.HandlerConfig{})
	serve(h, "GET")
	if runs.Load() != 1 || p.second == nil {
		t.Fatalf("%d runs, second call returned %v", runs.Load(), p.second)
	}
}

// failPolicy fails without running fn, with an error that is not a
// rejection.
type failPolicy struct{ err error }

func (p failPolicy) Execute(context.Context, policy.Func) error { return p.err }

func TestHandlerPolicyErrorBeforeHandler(t *testing.T) {
	h := httppolicy.Handler(failPolicy{context.Canceled}, http.NotFoundHandler(), httppolicy.HandlerConfig{})
	if rec := serve(h, "GET"); rec.Code != 503 || rec.Header().Get("Retry-After") != "" {
		t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestHandlerPanicFreesSlot(t *testing.T) {
	bh := newBulkhead(t, 1, 0)
	h := httppolicy.Handler(newPipeline(t, compose.Policies{Bulkhead: bh}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic("handler exploded")
	}), httppolicy.HandlerConfig{})
	func() {
		defer func() {
			if v := recover(); v != "handler exploded" {
				t.Fatalf("recovered %v", v)
			}
		}()
		serve(h, "GET")
	}()
	if bh.Active() != 0 {
		t.Fatal("panic leaked the slot")
	}
	// And through a real server, which recovers it.
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic is expected
	srv.Start()
	t.Cleanup(srv.Close)
	resp, err := newBase(t, 1).RoundTrip(httptest.NewRequest("GET", srv.URL, nil).WithContext(context.Background()))
	if err == nil {
		resp.Body.Close()
	}
	waitFor(t, "the slot to be freed", func() bool { return bh.Active() == 0 })
}

func TestResponseControllerThroughWrapper(t *testing.T) {
	flushed := make(chan struct{})
	srv := newServer(t, httppolicy.Handler(newPipeline(t, compose.Policies{Deadline: newDeadline(t, time.Minute)}),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := w.(http.Flusher); !ok {
				t.Error("not a Flusher")
			}
			if _, ok := w.(http.Hijacker); !ok {
				t.Error("not a Hijacker")
			}
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
			if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetReadDeadline: %v", err)
			}
			io.WriteString(w, "first")
			if err := rc.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			<-flushed // the client has read "first": the flush went out
			io.WriteString(w, "second")
		}), httppolicy.HandlerConfig{}).ServeHTTP)
	base := newBase(t, 1)
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := base.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("%q %v", buf, err)
	}
	close(flushed)
	if got := readAll(t, resp.Body); got != "second" {
		t.Fatalf("rest %q", got)
	}
}

func TestHijackThroughWrapper(t *testing.T) {
	srv := newServer(t, httppolicy.Handler(newPipeline(t, compose.Policies{Deadline: newDeadline(t, time.Minute)}),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, brw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			brw.Flush()
		}), httppolicy.HandlerConfig{}).ServeHTTP)
	base := newBase(t, 1)
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := base.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := readAll(t, resp.Body); got != "hi" {
		t.Fatalf("body %q", got)
	}
}

func TestWrapperWithoutSupport(t *testing.T) {
	// A writer with none of the optional interfaces.
	var sawFlush, sawHijack, sawDeadline error
	h := httppolicy.Handler(&plainPolicy{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		sawFlush = rc.Flush()
		_, _, sawHijack = w.(http.Hijacker).Hijack()
		sawDeadline = rc.SetWriteDeadline(time.Now())
		w.(io.ReaderFrom).ReadFrom(bufio.NewReader(stringsReader("body")))
	}), httppolicy.HandlerConfig{})
	w := &bareWriter{h: http.Header{}}
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	for _, err := range []error{sawFlush, sawHijack, sawDeadline} {
		if !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("got %v, want ErrNotSupported", err)
		}
	}
	if w.body != "body" || w.code != 200 {
		t.Fatalf("wrote %d %q", w.code, w.body)
	}
}

type bareWriter struct {
	h    http.Header
	code int
	body string
}

func (w *bareWriter) Header() http.Header { return w.h }
func (w *bareWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	w.body += string(b)
	return len(b), nil
}
func (w *bareWriter) WriteHeader(code int) { w.code = code }

func TestMiddleware(t *testing.T) {
	br := newBreaker(t, 1)
	mw := httppolicy.Middleware(newPipeline(t, compose.Policies{Breaker: br}), httppolicy.HandlerConfig{RetryAfter: 5 * time.Second})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }))
	serve(h, "GET")
	rec := serve(h, "GET")
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("got %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}

func TestHandlerNilArguments(t *testing.T) {
	tests := []struct {
		name string
		fn   func()
	}{
		{"nil policy", func() { httppolicy.Handler(nil, http.NotFoundHandler(), httppolicy.HandlerConfig{}) }},
		{"nil handler", func() { httppolicy.Handler(&plainPolicy{}, nil, httppolicy.HandlerConfig{}) }},
		{"nil middleware policy", func() { httppolicy.Middleware(nil, httppolicy.HandlerConfig{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if v, _ := recover().(string); len(v) < 11 || v[:11] != "httppolicy:" {
					t.Fatalf("panic %q", v)
				}
			}()
			tt.fn()
		})
	}
}

// withHeader is an outer middleware that sets a header on the way in, for
// every response, as request-id or CORS middlewares do.
func withHeader(key, value string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(key, value)
			next.ServeHTTP(w, r)
		})
	}
}

// gzipOutside is an outer middleware that compresses the whole response:
// Content-Encoding is set on entry, whatever the inner handler answers
// (go.dev/issue/66343).
func gzipOutside(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		next.ServeHTTP(gzipWriter{ResponseWriter: w, gz: gz}, r)
	})
}

type gzipWriter struct {
	http.ResponseWriter
	gz *gzip.Writer
}

func (w gzipWriter) Write(b []byte) (int, error) { return w.gz.Write(b) }

// protoServer starts h over HTTP/1.1 or, with TLS, HTTP/2, and returns the
// server's own client (its idle connections are closed with the server).
func protoServer(t *testing.T, h http.Handler, h2 bool) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, srv.Client()
}

// TestHandlerOwnHeaders checks that the headers the inner handler sets go
// out only if it answers: the 504 that Handler writes in its place goes out
// over the headers as they were on entry.
func TestHandlerOwnHeaders(t *testing.T) {
	const cacheable = "public, max-age=86400"
	// setAll sets headers that must never reach a 504: an encoding the
	// plain-text body does not have, a cookie, and a long cache lifetime.
	setAll := func(w http.ResponseWriter) {
		h := w.Header()
		h.Set("Content-Encoding", "gzip")
		h.Set("Set-Cookie", "session=1")
		h.Set("Cache-Control", cacheable)
	}
	timesOut := func(w http.ResponseWriter, r *http.Request) {
		setAll(w)
		<-r.Context().Done()
	}
	dropped := map[string]string{"Set-Cookie": "", "Cache-Control": "", "Content-Encoding": ""}
	tests := []struct {
		name     string
		outer    func(http.Handler) http.Handler // nil: none
		h        http.HandlerFunc
		wantCode int
		wantBody string
		want     map[string]string // header values the client sees; "" means absent
		wantGzip bool              // the client decompressed the body
		want1xx  string            // the Link header of a 103, if one is expected
	}{
		{"timed out: handler's headers dropped", nil, timesOut, 504, "Gateway Timeout\n", dropped, false, ""},
		{"timed out: outer header kept", withHeader("X-Outer", "kept"), timesOut, 504, "Gateway Timeout\n",
			map[string]string{"X-Outer": "kept", "Set-Cookie": "", "Cache-Control": ""}, false, ""},
		{"timed out under an outer gzip", gzipOutside, timesOut, 504, "Gateway Timeout\n",
			map[string]string{"Set-Cookie": "", "Cache-Control": ""}, true, ""},
		{"timed out after a 103", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			setAll(w)
			<-r.Context().Done()
		}, 504, "Gateway Timeout\n", map[string]string{"Link": "", "Set-Cookie": "", "Cache-Control": ""}, false, "</a.css>; rel=preload"},
		{"answered: handler's headers sent", withHeader("X-Outer", "kept"), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Set-Cookie", "session=1")
			w.Header().Set("Cache-Control", cacheable)
			io.WriteString(w, "ok")
		}, 200, "ok", map[string]string{"X-Outer": "kept", "Set-Cookie": "session=1", "Cache-Control": cacheable}, false, ""},
		{"answered: outer header deleted by handler", withHeader("X-Outer", "kept"), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Del("X-Outer")
			w.WriteHeader(http.StatusAccepted)
		}, 202, "", map[string]string{"X-Outer": ""}, false, ""},
		{"status written then timed out: headers kept", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusAccepted)
			<-r.Context().Done()
		}, 202, "", map[string]string{"Cache-Control": "no-store"}, false, ""},
		{"flushed then timed out: headers kept", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, 200, "", map[string]string{"Cache-Control": "no-store"}, false, ""},
		{"returned without writing: headers sent with the implicit 200", withHeader("X-Outer", "kept"), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Header().Set("Set-Cookie", "session=1")
		}, 200, "", map[string]string{"X-Outer": "kept", "Access-Control-Allow-Origin": "*", "Set-Cookie": "session=1"}, false, ""},
		{"103 then returned without writing: headers sent", nil, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Access-Control-Allow-Origin", "*")
		}, 200, "", map[string]string{"Access-Control-Allow-Origin": "*"}, false, "</a.css>; rel=preload"},
	}
	for _, h2 := range []bool{false, true} {
		for _, tt := range tests {
			name := "HTTP1/" + tt.name
			if h2 {
				name = "HTTP2/" + tt.name
			}
			t.Run(name, func(t *testing.T) {
				var h http.Handler = httppolicy.Handler(newPipeline(t, compose.Policies{Deadline: newDeadline(t, 20*time.Millisecond)}), tt.h, httppolicy.HandlerConfig{})
				if tt.outer != nil {
					h = tt.outer(h)
				}
				srv, client := protoServer(t, h, h2)
				var got1xx string
				trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
					got1xx = header.Get("Link")
					return nil
				}}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", srv.URL, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("reading the %d: %v", resp.StatusCode, err)
				}
				if resp.StatusCode != tt.wantCode || string(body) != tt.wantBody {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.wantCode, tt.wantBody)
				}
				for k, v := range tt.want {
					if got := resp.Header.Get(k); got != v {
						t.Errorf("%s = %q, want %q", k, got, v)
					}
				}
				if resp.Uncompressed != tt.wantGzip {
					t.Errorf("decompressed %v, want %v", resp.Uncompressed, tt.wantGzip)
				}
				if got1xx != tt.want1xx {
					t.Errorf("1xx Link = %q, want %q", got1xx, tt.want1xx)
				}
			})
		}
	}
}

// TestHandlerTrailers checks that trailers still work although the handler
// writes its headers into a map of its own until it answers: declared with
// the Trailer header before the first write, or with http.TrailerPrefix
// after it, through w.Header() or through the map the handler got from it
// before writing.
func TestHandlerTrailers(t *testing.T) {
	tests := []struct {
		name string
		h    http.HandlerFunc
	}{
		{"declared, set after the write", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "abc")
		}},
		{"declared, set after WriteHeader", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "abc")
		}},
		{"declared, set after a flush", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			w.(http.Flusher).Flush()
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "abc")
		}},
		// Undeclared trailers need a chunked response over HTTP/1.1: the
		// flush makes one (a short body would get a Content-Length).
		{"TrailerPrefix after the write", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Sum", "abc")
		}},
		{"declared, set in the map kept from before the write", func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			h.Set("X-Sum", "abc")
		}},
		{"TrailerPrefix in the map kept from before the write", func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			h.Set(http.TrailerPrefix+"X-Sum", "abc")
		}},
	}
	for _, h2 := range []bool{false, true} {
		for _, tt := range tests {
			name := "HTTP1/" + tt.name
			if h2 {
				name = "HTTP2/" + tt.name
			}
			t.Run(name, func(t *testing.T) {
				h := httppolicy.Handler(newPipeline(t, compose.Policies{Deadline: newDeadline(t, time.Minute)}), tt.h, httppolicy.HandlerConfig{})
				srv, client := protoServer(t, h, h2)
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if got := readAll(t, resp.Body); got != "body" {
					t.Fatalf("body %q", got)
				}
				if got := resp.Trailer.Get("X-Sum"); got != "abc" {
					t.Fatalf("trailer X-Sum = %q, want %q (trailers %v)", got, "abc", resp.Trailer)
				}
			})
		}
	}
}

// TestHandlerRejectionKeepsEntryHeaders checks the 503 of a rejection: it
// goes out over the headers an outer middleware set on entry.
func TestHandlerRejectionKeepsEntryHeaders(t *testing.T) {
	bh := newBulkhead(t, 1, 0)
	entered, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	h := withHeader("X-Outer", "kept")(httppolicy.Handler(newPipeline(t, compose.Policies{Bulkhead: bh}), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=1")
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
	}), httppolicy.HandlerConfig{}))
	done := make(chan struct{})
	go func() { serve(h, "GET"); close(done) }()
	<-entered // the slot is held
	rec := serve(h, "GET")
	close(release)
	<-done
	if rec.Code != 503 || rec.Header().Get("X-Outer") != "kept" || rec.Header().Get("Set-Cookie") != "" || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("got %d with headers %v", rec.Code, rec.Header())
	}
}
