package statuspage

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"
)

// Options configures a [Page]. The zero value is valid: a read-only page
// of no pipeline, refreshed every 2 s.
type Options struct {
	// Pipelines are the pipelines shown, in this order: a
	// *watertight.Pipeline (a Client's included) or a *compose.Pipeline.
	// Their names must be distinct.
	Pipelines []Pipeline

	// Refresh is how often the HTML page asks the browser to load it
	// again. 0 means 2 s; negative, never.
	Refresh time.Duration

	// AllowUpdates adds, to each *watertight.Pipeline, a form that changes
	// its settings by POST (Pipeline.Update), with a token that only the
	// page holds, from the page's own origin. Off, the page refuses every
	// POST. Mount the page behind your service's own authentication, as
	// net/http/pprof's.
	AllowUpdates bool
}

// Page is an http.Handler that serves the live state of the pipelines it
// was given: an HTML page without JavaScript, and the same state as JSON
// for ?format=json. Build one with [New] and Close it when done. It is
// safe for concurrent use. The zero value is not usable.
type Page struct {
	opts    Options
	byName  map[string]Pipeline
	hist    []*history
	refresh int // seconds; 0: none
	token   string
	origin  *http.CrossOriginProtection

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New returns a Page over the pipelines of opts, which starts counting
// their rejections (compose.Pipeline.CountRejections) and samples them
// once a second, on a goroutine of its own, until Close. It fails if a
// pipeline is nil or two share a name.
func New(opts Options) (*Page, error) {
	pg := &Page{opts: opts, byName: map[string]Pipeline{}, stop: make(chan struct{}), done: make(chan struct{}),
		origin: http.NewCrossOriginProtection()}
	for i, p := range opts.Pipelines {
		if p == nil || isNil(p) {
			return nil, fmt.Errorf("statuspage: Options.Pipelines[%d] is nil", i)
		}
		if _, dup := pg.byName[p.Name()]; dup {
			return nil, fmt.Errorf("statuspage: Options.Pipelines[%d]: the name %q is also another pipeline's", i, p.Name())
		}
		pg.byName[p.Name()] = p
		pg.hist = append(pg.hist, newHistory())
	}
	switch {
	case opts.Refresh == 0:
		pg.refresh = 2
	case opts.Refresh > 0:
		pg.refresh = max(int(opts.Refresh.Round(time.Second)/time.Second), 1)
	}
	var b [16]byte
	rand.Read(b[:])
	pg.token = hex.EncodeToString(b[:])
	for i, p := range opts.Pipelines {
		p.CountRejections()
		pg.hist[i].baseline(p.Rejections())
	}
	go pg.sample()
	return pg, nil
}

// Close stops the sampling goroutine. It is safe to call more than once;
// the page goes on serving, its rejections no longer sampled.
func (pg *Page) Close() error {
	pg.once.Do(func() { close(pg.stop) })
	<-pg.done
	return nil
}

func (pg *Page) sample() {
	defer close(pg.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-pg.stop:
			return
		case <-tick.C:
		}
		for i, p := range pg.opts.Pipelines {
			pg.hist[i].sample(p.Rejections())
		}
	}
}

// State returns the state the page shows now.
func (pg *Page) State() State {
	st := State{Time: time.Now(), Pipelines: make([]PipelineState, 0, len(pg.opts.Pipelines))}
	for i, p := range pg.opts.Pipelines {
		st.Pipelines = append(st.Pipelines, pipelineState(p, pg.hist[i]))
	}
	return st
}

var errQuery = errors.New("statuspage: unknown query parameter: the page takes only format=html or format=json")

// ServeHTTP serves GET and HEAD: the HTML page, or with ?format=json the
// State as JSON. With Options.AllowUpdates it serves POST, an update of
// one pipeline (see Options.AllowUpdates). It answers 400 to a query it
// does not know, and 405 to any other method.
func (pg *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	post := r.Method == http.MethodPost && pg.opts.AllowUpdates
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !post {
		allow := "GET, HEAD"
		if pg.opts.AllowUpdates {
			allow += ", POST"
		}
		w.Header().Set("Allow", allow)
		http.Error(w, "statuspage: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	format, err := formatOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if post {
		pg.origin.Handler(http.HandlerFunc(pg.update)).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if format == "json" {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(pg.State())
		return
	}
	pg.render(w, http.StatusOK, "", "")
}

// formatOf returns the format r asks for: "html" or "json".
func formatOf(r *http.Request) (string, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "format" {
			return "", errQuery
		}
	}
	switch f := q.Get("format"); f {
	case "", "html":
		return "html", nil
	case "json":
		return "json", nil
	}
	return "", errQuery
}

// isNil reports whether p is a typed nil pointer, which would panic on
// the first render.
func isNil(p Pipeline) bool {
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// typeName is the name of p's type, for a policy the page does not know.
func typeName(p any) string { return reflect.TypeOf(p).String() }
