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
	"github.com/watertight/watertight/hedge"
	"github.com/watertight/watertight/httppolicy"
)

// A hedged GET: when the first attempt has not answered after 20 ms, a
// second starts beside it; the first response wins, and the slow request
// is canceled. Each attempt is a whole call of the pipeline, with its own
// bulkhead slot: the bulkhead's Limit bounds attempts, and the pool needs
// no more connections than that.
func ExampleHedging() {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			<-r.Context().Done() // a slow replica: canceled once the hedge wins
			return
		}
		io.WriteString(w, "from the hedge")
	}))
	defer srv.Close()

	bh, _ := bulkhead.New(bulkhead.Config{Name: "search", Limit: 10})
	defer bh.Close()
	pipeline, _ := compose.New("search", compose.Policies{Bulkhead: bh})
	hedge, _ := hedge.New(hedge.Config{Name: "search", Delay: 20 * time.Millisecond, MaxHedges: 1})

	base := httppolicy.NewDependencyTransport(bh.Limit())
	defer base.CloseIdleConnections()
	tr := &httppolicy.Transport{Base: base, Policy: pipeline}
	client := &http.Client{Transport: &httppolicy.Hedging{Base: tr, Hedge: hedge}}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", hits.Load(), "requests")
	// Output: 200 from the hedge after 2 requests
}
