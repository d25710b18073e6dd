package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log's output, read while the log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func open(t *testing.T, doc string) (*Pipelines, string, *syncBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pipelines.json")
	write(t, path, doc)
	out := &syncBuffer{}
	ps, err := Open(path, slog.New(slog.NewTextHandler(out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Close)
	return ps, path, out
}

func write(t *testing.T, path, doc string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

const lowered = `{"chat": {"bulkhead": {"limit": 3, "max_queue": 20, "max_wait": "1s"}, "retry": {"max_attempts": 3}},
 "login": {"bulkhead": {"limit": 50}}}`

// TestReloadAppliesAChangedFile checks that a changed file updates the
// pipelines in place, and that the change is logged by path.
func TestReloadAppliesAChangedFile(t *testing.T) {
	ps, path, log := open(t, sample)
	chat := ps.Pipeline("chat")
	if changed, err := ps.Reload(); changed || err != nil {
		t.Fatalf("Reload of the file as read: %v, %v; want no change", changed, err)
	}
	write(t, path, lowered)
	if changed, err := ps.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	if ps.Pipeline("chat") != chat || chat.Bulkhead().Limit() != 3 {
		t.Errorf("chat's limit %d; want 3, in the same pipeline", chat.Bulkhead().Limit())
	}
	if got := log.String(); !strings.Contains(got, "setting=bulkhead.limit from=10 to=3") {
		t.Errorf("log %q; want the change of bulkhead.limit", got)
	}
}

// TestReloadKeepsTheLastGoodConfig checks that a file that is invalid,
// names another pipeline, leaves one out or is refused by one changes
// nothing, and that a pipeline updated before another refused goes back.
func TestReloadKeepsTheLastGoodConfig(t *testing.T) {
	ps, path, _ := open(t, sample)
	for name, doc := range map[string]string{
		"not JSON":         `{"chat": `,
		"unknown field":    strings.Replace(lowered, `"limit": 3`, `"limt": 3`, 1),
		"invalid value":    strings.Replace(lowered, `"limit": 3`, `"limit": 0`, 1),
		"unknown":          strings.Replace(lowered, `"login"`, `"logon"`, 1),
		"missing":          `{"chat": {"bulkhead": {"limit": 3}, "retry": {}}}`,
		"refused by login": strings.Replace(lowered, `"login": {"bulkhead": {"limit": 50}}`, `"login": {"bulkhead": {"limit": 50}, "retry": {}}`, 1),
	} {
		write(t, path, doc)
		if changed, err := ps.Reload(); !changed || err == nil {
			t.Errorf("%s: Reload = %v, %v; want an error", name, changed, err)
		}
		if got := ps.Pipeline("chat").Bulkhead().Limit(); got != 10 {
			t.Errorf("%s: chat's limit %d; want the 10 in force kept", name, got)
		}
	}
	if changed, err := ps.Reload(); changed || err != nil {
		t.Errorf("Reload of the same invalid file: %v, %v; want it skipped", changed, err)
	}
}

// TestFollowOnSIGHUP checks that Follow reloads at a hangup, and logs an
// invalid file as kept.
func TestFollowOnSIGHUP(t *testing.T) {
	ps, path, log := open(t, sample)
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() { ps.Follow(ctx, time.Hour, hup); close(done) }()
	defer func() { cancel(); <-done }()
	// Follow takes the second signal once the first one's reload is over.
	write(t, path, lowered)
	hup <- nil
	hup <- nil
	if got := ps.Pipeline("chat").Bulkhead().Limit(); got != 3 {
		t.Errorf("after SIGHUP: chat's limit %d; want 3", got)
	}
	write(t, path, `{`)
	hup <- nil
	hup <- nil
	if got := log.String(); !strings.Contains(got, "config: invalid, keeping the last good config") {
		t.Errorf("log %q; want the invalid file reported as kept", got)
	}
}

// TestHandler checks /config, /chat and /login.
func TestHandler(t *testing.T) {
	ps, _, _ := open(t, sample)
	srv := httptest.NewServer(ps.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got["chat"]), `"limit":10`) || !strings.Contains(string(got["login"]), `"limit":50`) {
		t.Errorf("/config = %s", got)
	}
	for _, path := range []string{"/chat", "/login"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
}
