package statuspage

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
)

//go:embed page.html
var pageHTML string

var tmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"deref": func(f *float64) float64 { return *f },
}).Parse(pageHTML))

// view is what the template renders.
type view struct {
	State     State
	Pipelines []pipelineView
	Refresh   int
	Token     string
	Updated   string
	Error     string
}

type pipelineView struct {
	PipelineState
	Spark  string // the sparkline's points
	Form   bool
	Config string // the settings in force, as JSON, for the form
}

// render writes the page with status code, after an update of the
// pipeline named updated, or with errMsg.
func (pg *Page) render(w http.ResponseWriter, code int, updated, errMsg string) {
	st := pg.State()
	v := view{State: st, Refresh: pg.refresh, Updated: updated, Error: errMsg}
	if pg.opts.AllowUpdates {
		v.Token = pg.token
	}
	for i, p := range st.Pipelines {
		pv := pipelineView{PipelineState: p, Spark: spark(p.PerSecond)}
		if u, ok := pg.opts.Pipelines[i].(updatable); ok && pg.opts.AllowUpdates {
			pv.Form, pv.Config = configJSON(u.Config())
		}
		v.Pipelines = append(v.Pipelines, pv)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	tmpl.Execute(w, v)
}

// spark returns the points of a sparkline of per, 180 by 24, scaled to
// its highest value.
func spark(per []int64) string {
	top := int64(1)
	for _, n := range per {
		top = max(top, n)
	}
	var b strings.Builder
	for i, n := range per {
		x := float64(i) * 179 / float64(max(len(per)-1, 1))
		y := 23 - float64(n)*22/float64(top)
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String())
}

// configJSON returns cfg as indented JSON for the form, with <, > and &
// as they are: the template escapes them.
func configJSON(cfg any) (bool, string) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return false, ""
	}
	return true, strings.TrimSpace(b.String())
}
