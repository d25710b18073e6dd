package fallback_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/fallback"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/retry"
)

// httpError is what an SDK makes of a failure response that the Transport
// hands back with a nil error.
type httpError struct{ status int }

func (e *httpError) Error() string { return fmt.Sprintf("status %d", e.status) }

// sdkShouldFallback is the classifier an SDK's errors need: 408, 429 and
// 5xx move on, other 4xx do not; and the default's reasons.
func sdkShouldFallback(err error) bool {
	if he, ok := errors.AsType[*httpError](err); ok {
		return he.status == 408 || he.status == 429 || he.status >= 500
	}
	return fallback.DefaultShouldFallback(err)
}

// streamChat posts to url through c and reads an SSE stream, handing each
// data line to out and marking the delivery.
func streamChat(c *http.Client, url string, out *[]string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"stream":true}`))
		res, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			return "", &httpError{res.StatusCode}
		}
		var full strings.Builder
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				return full.String(), nil
			}
			*out = append(*out, data)
			fallback.MarkDelivered(ctx)
			full.WriteString(data)
		}
		if err := sc.Err(); err != nil {
			return "", err
		}
		return "", errors.New("stream ended without [DONE]")
	}
}

func pipelineClient(t *testing.T, name string) (*http.Client, *breaker.Breaker) {
	rt := must[*retry.Retry](t)(retry.New(retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond}))
	br := must[*breaker.Breaker](t)(breaker.New(breaker.Config{Name: name, ConsecutiveFailures: 2, OpenTimeout: time.Hour}))
	t.Cleanup(func() { br.Close() })
	tr := &httppolicy.Transport{Base: &http.Transport{}, RetryUnsafe: true,
		Policy: must[*compose.Pipeline](t)(compose.New(name, compose.Policies{Retry: rt, Breaker: br}))}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, br
}

// OpenAI down (503), Anthropic streaming: the first call falls back after
// the primary's retries, the next ones on its open breaker without a
// request; a secondary whose stream breaks after a chunk is not
// followed by anything, and not retried.
func TestHTTPProviders(t *testing.T) {
	var primaryHits, secondaryHits atomic.Int32
	breakStream := atomic.Bool{}
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		primaryHits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer primary.Close()
	secondary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secondaryHits.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: content_block_delta\ndata: Hel\n\n")
		w.(http.Flusher).Flush()
		if breakStream.Load() {
			// Cut the connection mid-stream.
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		fmt.Fprint(w, "event: content_block_delta\ndata: lo\n\nevent: message_stop\ndata: [DONE]\n\n")
	}))
	defer secondary.Close()
	pc, pbr := pipelineClient(t, "openai")
	sc, _ := pipelineClient(t, "anthropic")
	cfg := fallback.Config{Name: "chat", ShouldFallback: sdkShouldFallback}

	for i := range 3 {
		var chunks []string
		got, err := fallback.Do(context.Background(), cfg, []fallback.Alternative[string]{
			{Name: "openai", Fn: streamChat(pc, primary.URL, &chunks)},
			{Name: "anthropic", Fn: streamChat(sc, secondary.URL, &chunks)},
		})
		if err != nil || got != "Hello" || strings.Join(chunks, "") != "Hello" {
			t.Fatalf("call %d: %q, %v, chunks %q", i, got, err, chunks)
		}
	}
	if primaryHits.Load() != 2 || pbr.State() != breaker.Open {
		t.Errorf("primary saw %d requests, breaker %v: want 2 (one call's retries), open", primaryHits.Load(), pbr.State())
	}

	breakStream.Store(true)
	before := secondaryHits.Load()
	var chunks []string
	_, err := fallback.Do(context.Background(), fallback.Config{ShouldFallback: func(error) bool { return true }},
		[]fallback.Alternative[string]{
			{Name: "anthropic", Fn: streamChat(sc, secondary.URL, &chunks)},
			{Name: "openai", Fn: streamChat(pc, primary.URL, &chunks)},
		})
	fe, ok := errors.AsType[*fallback.Error](err)
	if !ok || fe.Stop != fallback.StopDelivered || strings.Join(chunks, "") != "Hel" || secondaryHits.Load()-before != 1 {
		t.Errorf("broken stream: %v, chunks %q, %d requests", err, chunks, secondaryHits.Load()-before)
	}
}
