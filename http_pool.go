package watertight

import (
	"net/http"
	"sync/atomic"

	"github.com/watertight/watertight/httppolicy"
)

// pool is a connection pool NewHTTPClient built, whose cap follows the
// pipeline's limit. A new cap swaps in a new http.Transport, since an
// http.Transport's settings must not change once it is in use: requests
// in flight finish on the old one, whose idle connections are closed.
type pool struct {
	t   atomic.Pointer[http.Transport]
	cap int // 0: http.DefaultTransport's caps; guarded by Client.mu after New
}

func newPool(n int) *pool {
	p := &pool{cap: n}
	p.t.Store(capped(n))
	return p
}

// capped returns a connection pool capped at n connections per host, or
// with http.DefaultTransport's caps if n is 0.
func capped(n int) *http.Transport {
	if n > 0 {
		return httppolicy.NewDependencyTransport(n)
	}
	t := httppolicy.NewDependencyTransport(1)
	t.MaxConnsPerHost, t.MaxIdleConnsPerHost = 0, 0
	return t
}

func (p *pool) RoundTrip(r *http.Request) (*http.Response, error) { return p.t.Load().RoundTrip(r) }

// CloseIdleConnections closes the pool's idle connections.
func (p *pool) CloseIdleConnections() { p.t.Load().CloseIdleConnections() }

// resize caps the pool at n connections per host (0: no cap).
func (p *pool) resize(n int) {
	if n == p.cap {
		return
	}
	p.cap = n
	p.t.Swap(capped(n)).CloseIdleConnections()
}

// poolCap is the cap of a pool sized to p's bulkhead or adaptive limit,
// or 0 without either.
func poolCap(p *Pipeline) int {
	switch bh, l := p.Bulkhead(), p.Limiter(); {
	case bh != nil:
		return bh.Limit()
	case l != nil:
		return l.MaxLimit()
	}
	return 0
}
