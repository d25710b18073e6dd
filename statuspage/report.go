package statuspage

// Reporter is a policy of another package that reports its state to the
// page, such as redisstate's Budget and SharedBreaker. The page calls
// Report each time it renders, so Report must be quick and must not wait
// on a call: read atomics.
type Reporter interface {
	Report() Report
}

// Report is a policy's state as a Reporter tells it: its kind and name,
// and named values in the order the page shows them.
type Report struct {
	Kind   string  `json:"kind"`
	Name   string  `json:"name,omitempty"`
	Fields []Field `json:"fields"`
}

// Field is one value of a Report. Alert marks a value the page shows as
// alarming: an open breaker, an unreachable Redis.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Alert bool   `json:"alert,omitempty"`
}
