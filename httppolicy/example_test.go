package httppolicy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// A client for one dependency: its own bulkhead, a budget for the whole
// call, retries that honour Retry-After, and a connection pool sized to the
// bulkhead.
func ExampleTransport() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "10")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "a completion")
	}))
	defer srv.Close()

	bh, _ := bulkhead.New(bulkhead.Config{Name: "llm", Limit: 10, MaxQueue: 20, MaxWait: time.Second})
	defer bh.Close()
	dl, _ := deadline.New(deadline.Config{Name: "llm", Timeout: 30 * time.Second})
	rt, _ := retry.New(retry.Config{Name: "llm", MaxAttempts: 3})
	pipeline, _ := compose.New("llm", compose.Policies{Bulkhead: bh, Deadline: dl, Retry: rt})

	base := httppolicy.NewDependencyTransport(bh.Limit())
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &httppolicy.Transport{Base: base, Policy: pipeline}}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close() // frees the bulkhead slot
	fmt.Println(resp.StatusCode, string(body), "after", hits.Load(), "attempts;", bh.Active(), "slots held")
	// Output: 200 a completion after 2 attempts; 0 slots held
}

// A server whose /chat route has a compartment of its own: when it is
// full, callers get a fast 503 with Retry-After instead of a slow answer.
func ExampleHandler() {
	bh, _ := bulkhead.New(bulkhead.Config{Name: "chat", Limit: 1})
	defer bh.Close()
	release := make(chan struct{})
	started := make(chan struct{})
	chat := httppolicy.Handler(bh, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release // a slow upstream
		io.WriteString(w, "a slow answer")
	}), httppolicy.HandlerConfig{RetryAfter: 2 * time.Second})

	mux := http.NewServeMux()
	mux.Handle("/chat", chat)
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	first := make(chan string)
	go func() {
		resp, _ := srv.Client().Get(srv.URL + "/chat")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		first <- string(b)
	}()
	<-started

	resp, _ := srv.Client().Get(srv.URL + "/chat")
	resp.Body.Close()
	fmt.Println("second chat:", resp.StatusCode, "Retry-After:", resp.Header.Get("Retry-After"))
	resp, _ = srv.Client().Get(srv.URL + "/login")
	resp.Body.Close()
	fmt.Println("login:", resp.StatusCode)
	close(release)
	fmt.Println("first chat:", <-first)
	// Output:
	// second chat: 503 Retry-After: 2
	// login: 200
	// first chat: a slow answer
}

func ExampleParseRetryAfter() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, h := range []http.Header{
		{"Retry-After": {"120"}},
		{"Retry-After": {"Sun, 01 Mar 2026 12:00:30 GMT"}},
		{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}},
		{"Retry-After": {"soon"}},
	} {
		fmt.Println(httppolicy.ParseRetryAfter(h, now))
	}
	// Output:
	// 2m0s true
	// 30s true
	// 250ms true
	// 0s false
}
