package httppolicy_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
)

// gzipChunks compresses parts as one gzip stream, flushed after each
// part, and returns the bytes that each flush wrote (the last with the
// stream's end).
func gzipChunks(t testing.TB, parts ...string) []string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	var chunks []string
	for i, p := range parts {
		zw.Write([]byte(p))
		if i == len(parts)-1 {
			zw.Close()
		} else {
			zw.Flush()
		}
		chunks = append(chunks, buf.String())
		buf.Reset()
	}
	return chunks
}

// A caller that asks for gzip itself gets the event stream still
// encoded: the watch counts its bytes as for any other content type, so
// a healthy stream's first event brings the first byte.
func TestGzipEventStreamFirstByte(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, commentPing+openaiChunk)
		zw.Flush()
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the stream goes on until the caller closes it
	})
	tr := &httppolicy.Transport{Base: newBase(t, 1), FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second,
		Policy: newPipeline(t, compose.Policies{})}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q: net/http decoded the body", ce)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := commentPing + openaiChunk
	got := make([]byte, len(want))
	if _, err := io.ReadFull(zr, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("read %q, want %q", got, want)
	}
}

// The idle timer of an encoded event stream restarts on its bytes.
func TestGzipEventStreamIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 3 * time.Second
		parts := []string{openaiChunk}
		for range 10 {
			parts = append(parts, openaiChunk)
		}
		chunks := gzipChunks(t, parts...)
		steps := []step{{0, chunks[0]}}
		for _, c := range chunks[1:] {
			steps = append(steps, step{2 * time.Second, c})
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
			resp.Header.Set("Content-Encoding", "gzip")
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, IdleTimeout: idle,
			Policy: newPipeline(t, compose.Policies{Retry: newRetry(t, 3, nil)})}
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://dep.test/", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, zr)
		if want := strings.Repeat(openaiChunk, 11); got != want {
			t.Fatalf("read %q, want %q", got, want)
		}
		if base.count() != 1 {
			t.Fatalf("%d attempts, want 1", base.count())
		}
	})
}

// Content-Encoding identity leaves the body as it is: its keepalives are
// still told from its events.
func TestIdentityEventStreamKeepalivesDoNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", true, step{0, commentPing}, step{500 * time.Millisecond, anthropicPing})
			resp.Header.Set("Content-Encoding", "identity")
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, FirstByteTimeout: time.Second, Policy: newPipeline(t, compose.Policies{})}
		_, err := get(t, tr, context.Background())
		isStreamTimeout(t, err, httppolicy.ErrFirstByteTimeout)
	})
}

// An encoded event stream's keepalives cannot be told from its events:
// as IdleTimeout says, a gzip stream of keepalives alone, one every 2 s
// for 20 s, is never cut by an idle timeout of 3 s.
func TestGzipEventStreamOfKeepalivesIsNotCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pings := make([]string, 11)
		for i := range pings {
			pings[i] = commentPing
		}
		chunks := gzipChunks(t, pings...)
		steps := []step{{0, chunks[0]}}
		for _, c := range chunks[1:] {
			steps = append(steps, step{2 * time.Second, c})
		}
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			resp, b := fedResponse(req, 200, "text/event-stream", false, steps...)
			resp.Header.Set("Content-Encoding", "gzip")
			return resp, b, nil
		}}
		tr := &httppolicy.Transport{Base: base, IdleTimeout: 3 * time.Second, Policy: newPipeline(t, compose.Policies{})}
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://dep.test/", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := readAll(t, zr), strings.Repeat(commentPing, 11); got != want {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
}
