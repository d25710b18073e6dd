package route

// EndpointStatus is the live state of one endpoint, as [Router.Status]
// reads it.
type EndpointStatus struct {
	Name     string
	InFlight int     // calls in flight
	Latency  float64 // the latency estimate, in seconds; 0: none yet
	Load     float64 // the load score of the pick, in seconds (a stream that has answered may still count as unanswered)
	Out      bool    // out: it takes no calls but its probes
	Ejected  bool    // out as a latency outlier
}

// Status returns the state of every endpoint, in the order of
// Config.Endpoints. It reads atomics only: no lock a call takes.
func (r *Router) Status() []EndpointStatus {
	now, s := r.now(), r.set.Load()
	out := make([]EndpointStatus, len(r.eps))
	for i := range r.eps {
		e := &r.eps[i]
		out[i] = EndpointStatus{
			Name:     e.picked.Name,
			InFlight: int(e.pending.Load()),
			Latency:  float64(e.cost.Load()) / 1e9,
			Load:     e.load(now, s.eps[i].weight, s.ramp, false) / 1e9,
			Out:      e.out.Load() != 0,
			Ejected:  e.ejected.Load(),
		}
	}
	return out
}
