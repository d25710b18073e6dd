package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/statuspage"
)

// The page's JSON view, as a script reads it.
func Example() {
	chat, err := watertight.New("chat", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 10}})
	if err != nil {
		panic(err)
	}
	defer chat.Close()
	page, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{chat}})
	if err != nil {
		panic(err)
	}
	defer page.Close()
	// Mount it behind your own authentication: mux.Handle("/debug/watertight", page).
	chat.Execute(context.Background(), func(context.Context) error { return nil })

	w := httptest.NewRecorder()
	page.ServeHTTP(w, httptest.NewRequest("GET", "/debug/watertight?format=json", nil))
	var st statuspage.State
	json.Unmarshal(w.Body.Bytes(), &st)
	b := st.Pipelines[0].Slots[0]
	fmt.Printf("%s: %s limit %d, %d active\n", st.Pipelines[0].Name, b.Type, b.Bulkhead.Limit, b.Bulkhead.Active)
	// Output: chat: bulkhead limit 10, 0 active
}
