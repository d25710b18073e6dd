package httppolicy

import (
	"net/http"

	"github.com/watertight/watertight/policy"
)

// PriorityHeader is the request header in which a [Transport] with
// PropagatePriority sends its request's priority ("sheddable" or
// "critical"), and from which a [Handler] reads it when
// HandlerConfig.TrustPriority allows.
const PriorityHeader = "Watertight-Priority"

// withPriority puts the priority of r's context in r's header, replacing
// any there, or removes the header if the priority is the default. r is an
// attempt's copy of the caller's request: its header map is cloned first,
// so that the caller's is not modified.
func withPriority(r *http.Request) {
	p := policy.PriorityOf(r.Context())
	if _, ok := r.Header[PriorityHeader]; p == policy.PriorityDefault && !ok {
		return
	}
	r.Header = r.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header)
	}
	if p == policy.PriorityDefault {
		r.Header.Del(PriorityHeader)
		return
	}
	r.Header.Set(PriorityHeader, p.String())
}

// priorityOf returns the priority of a request to a Handler: the client's,
// if it is trusted and sent a known one, else the Handler's own choice. It
// reports false if neither gives one.
func (s *handler) priorityOf(r *http.Request) (policy.Priority, bool) {
	if s.trust != nil && s.trust(r) {
		if v := r.Header.Values(PriorityHeader); len(v) == 1 {
			if p, err := policy.ParsePriority(v[0]); err == nil {
				return p, true
			}
		}
	}
	if s.priority == nil {
		return policy.PriorityDefault, false
	}
	if p := s.priority(r); p >= policy.PrioritySheddable && p <= policy.PriorityCritical {
		return p, true
	}
	return policy.PriorityDefault, true
}
