package watertight

import (
	"cmp"
	"time"
)

// Update changes the client's pipeline as [Pipeline.Update] does, and
// caps each connection pool NewHTTPClient built at the new bulkhead Limit
// (or adaptive MaxLimit), or at its endpoint's new MaxConcurrent. A pool
// whose cap changes is replaced: requests in flight finish on the old
// pool, whose idle connections are closed, and new requests open
// connections in the new one. A Base given in HTTPOptions is left as it
// is. A Route with no Endpoints keeps the client's. Update is safe for
// concurrent use with requests and with itself.
func (c *Client) Update(cfg Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.Pipeline.Update(cfg); err != nil {
		return err
	}
	if c.Pipeline.Router() == nil {
		for _, pl := range c.pools {
			pl.resize(poolCap(c.Pipeline))
		}
		return nil
	}
	eps := c.Pipeline.Config().Route.Endpoints
	for i, pl := range c.pools {
		pl.resize(cmp.Or(eps[i].MaxConcurrent, poolCap(c.Pipeline)))
	}
	return nil
}

// SetStreamTimeouts changes HTTPOptions.FirstByteTimeout and IdleTimeout
// for the requests that start after it, as httppolicy's
// Transport.SetStreamTimeouts does. A negative timeout is refused.
func (c *Client) SetStreamTimeouts(firstByte, idle time.Duration) error {
	return c.tr.SetStreamTimeouts(firstByte, idle)
}
