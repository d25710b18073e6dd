package statuspage_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/statuspage"
)

// TestKeyedShowsNoKeys: the keys of a keyed.Group are its callers' input;
// the page shows how many are live and the most, never the keys: its
// size does not grow with them, and no key reaches the HTML or the JSON.
// The group's name is escaped.
func TestKeyedShowsNoKeys(t *testing.T) {
	g, err := keyed.NewGroup(keyed.Config{Name: `<i>hosts</i>`, MaxKeys: 50, New: func(string, string) (policy.Policy, error) {
		return bulkhead.New(bulkhead.Config{Limit: 1})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p := newPipeline(t, "api", watertight.Config{Use: compose.Policies{Breaker: g}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	_, before := get(pg, http.MethodGet, "/")
	for i := range 40 {
		k := fmt.Sprintf(`<script>k%02d</script>`, i)
		g.Execute(policy.WithKey(context.Background(), k), func(context.Context) error { return nil })
	}
	_, html := get(pg, http.MethodGet, "/")
	_, js := get(pg, http.MethodGet, "/?format=json")
	for _, body := range []string{html, js} {
		if strings.Contains(body, "k00") || strings.Contains(body, "<i>") {
			t.Errorf("a key or the raw name is in the page:\n%s", body)
		}
	}
	if !strings.Contains(html, "keys live <b>40</b> of 50") || !strings.Contains(html, "&lt;i&gt;hosts&lt;/i&gt;") {
		t.Errorf("HTML lacks the live keys or the escaped name:\n%s", html)
	}
	if !strings.Contains(js, `"keyed":{"keys":40,"max_keys":50}`) {
		t.Errorf("JSON lacks keyed's keys and max_keys: %s", js)
	}
	if d := len(html) - len(before); d < -16 || d > 16 {
		t.Errorf("the page grew %d bytes with 40 keys, want only the count to change", d)
	}
}
