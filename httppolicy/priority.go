package httppolicy

import (
	"net/http"
	"strings"

	"github.com/watertight/watertight/policy"
)

// PriorityHeader is the request header in which a [Transport] with
// PropagatePriority sends its request's priority ("sheddable" or
// "critical"), and from which a [Handler] reads it when
// HandlerConfig.TrustPriority allows. Both match its name in any spelling,
// as HTTP does.
const PriorityHeader = "Watertight-Priority"

// withPriority puts the priority of r's context in r's header, replacing
// any there, or removes the header if the priority is the default. r is an
// attempt's copy of the caller's request: its header map is cloned first,
// so that the caller's is not modified.
func withPriority(r *http.Request) {
	p := policy.PriorityOf(r.Context())
	if _, n := priorityValues(r.Header); p == policy.PriorityDefault && n == 0 {
		return
	}
	r.Header = r.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	for k := range r.Header {
		if strings.EqualFold(k, PriorityHeader) {
			delete(r.Header, k)
		}
	}
	if p != policy.PriorityDefault {
		r.Header.Set(PriorityHeader, p.String())
	}
}

// priorityValues returns the first value of h's [PriorityHeader], under
// any spelling of its name, and how many values it holds.
func priorityValues(h http.Header) (string, int) {
	v, n := "", 0
	for k, vs := range h {
		if strings.EqualFold(k, PriorityHeader) && len(vs) > 0 {
			v, n = vs[0], n+len(vs)
		}
	}
	return v, n
}

// priorityOf returns the priority of a request to a Handler: the client's,
// if it is trusted and sent a known one, else the Handler's own choice. It
// reports false if neither gives one.
func (s *handler) priorityOf(r *http.Request) (policy.Priority, bool) {
	if s.cfg.TrustPriority != nil && s.cfg.TrustPriority(r) {
		if v, n := priorityValues(r.Header); n == 1 {
			if p, err := policy.ParsePriority(v); err == nil {
				return p, true
			}
		}
	}
	if s.cfg.Priority == nil {
		return policy.PriorityDefault, false
	}
	if p := s.cfg.Priority(r); p >= policy.PrioritySheddable && p <= policy.PriorityCritical {
		return p, true
	}
	return policy.PriorityDefault, true
}
