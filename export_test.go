package watertight

import "net/http"

// PoolOf returns the connection pool in use by c's i-th pool: the only
// one, or the i-th endpoint's.
func PoolOf(c *Client, i int) *http.Transport { return c.pools[i].t.Load() }
