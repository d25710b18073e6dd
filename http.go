package watertight

import (
	"fmt"
	"net/http"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/internal/pipeopt"
	"github.com/watertight/watertight/retry"
)

// HTTPOptions are the settings of the httppolicy.Transport that
// [NewHTTPClient] builds. The zero value is valid: failures are 5xx, 408 and
// 429 ([httppolicy.DefaultIsFailure]), and requests that are not idempotent
// are retried only when the server plainly did not process them.
type HTTPOptions struct {
	// IsFailure is httppolicy.Transport.IsFailure: whether a response is a
	// failure of the dependency. Nil means httppolicy.DefaultIsFailure.
	IsFailure func(*http.Response) bool

	// RetryUnsafe is httppolicy.Transport.RetryUnsafe: retry POST and
	// PATCH requests without an idempotency key after any failure.
	RetryUnsafe bool

	// FirstByteTimeout, IdleTimeout and KeepaliveEvents are the
	// httppolicy.Transport fields of the same names. FirstByteTimeout is
	// the longest wait for a response's first byte of data; it fails the
	// attempt, which is retried when the request may be. IdleTimeout is the
	// longest the body's Reads wait in all for data that counts (for an
	// event stream, an event); it fails the call. KeepaliveEvents are the
	// server-sent event names that count for neither (nil means
	// ["ping"]). 0 turns a timeout off, and a negative one is invalid;
	// httppolicy.WithStreamTimeouts overrides both per request.
	FirstByteTimeout time.Duration
	IdleTimeout      time.Duration
	KeepaliveEvents  []string

	// Hedge, if set, hedges the requests that are safe to send twice at
	// once: the client's Transport is then an httppolicy.Hedging with
	// this Hedge around the httppolicy.Transport, so that each attempt is
	// a whole call of the pipeline, with its own bulkhead slot (see
	// httppolicy.Hedging for the requests it hedges). Nil means no
	// hedging. A Hedge in a slot of Config.Use is refused.
	Hedge *retry.Hedge
}

// Client is an *http.Client whose every request runs through Pipeline, over
// a connection pool of its own. Build one with [NewHTTPClient]; it is safe
// for concurrent use by multiple goroutines. Hand Client.Client to an SDK
// (openai-go's and anthropic-sdk-go's option.WithHTTPClient) or use it
// directly.
type Client struct {
	*http.Client
	// Pipeline is the pipeline every request runs through, one call per
	// request: its bulkhead slot and deadline last until the response body
	// has been read to its end or closed.
	Pipeline *Pipeline

	base *http.Transport
}

// NewHTTPClient builds the pipeline named name from cfg, as [New] does. It
// returns an *http.Client whose Transport, an httppolicy.Transport with
// the settings of h, runs every request through the pipeline.
//
// The requests go out over a transport of their own,
// httppolicy.NewDependencyTransport sized to the bulkhead's Limit (or an
// adaptive limiter's MaxLimit). Without either, it has
// http.DefaultTransport's settings. So an admitted call never waits unseen
// for a connection, and no other dependency shares its pool. With
// HTTPOptions.Hedge, each hedged attempt takes a bulkhead slot of its own:
// size the Limit for the hedges, as a hedge the bulkhead refuses stops the
// hedging.
//
// The client has no Timeout of its own: the pipeline's deadlines bound each
// request, its body included. If the RateLimit slot holds a
// *ratelimit.Limiter, every response's rate-limit headers feed its hold
// (httppolicy.LimiterSignals).
//
// NewHTTPClient fails as New does, and if a timeout in h is negative. Call
// [Client.Close] when done with the client.
func NewHTTPClient(name string, cfg Config, h HTTPOptions, opts ...compose.Option) (*Client, error) {
	switch {
	case h.FirstByteTimeout < 0:
		return nil, fmt.Errorf("watertight: HTTPOptions.FirstByteTimeout must be >= 0 (0 means none), got %v", h.FirstByteTimeout)
	case h.IdleTimeout < 0:
		return nil, fmt.Errorf("watertight: HTTPOptions.IdleTimeout must be >= 0 (0 means none), got %v", h.IdleTimeout)
	}
	p, err := New(name, cfg, opts...)
	if err != nil {
		return nil, err
	}
	var base *http.Transport
	if bh := p.Bulkhead(); bh != nil {
		base = httppolicy.NewDependencyTransport(bh.Limit())
	} else if l := p.Limiter(); l != nil {
		// The most calls the limit may ever admit at once, for a limiter
		// built from the Adaptive section or given in Use.Bulkhead.
		base = httppolicy.NewDependencyTransport(l.MaxLimit())
	} else {
		// No bulkhead to match: http.DefaultTransport's settings, caps
		// included (none on connections, net/http's default on idle ones).
		base = httppolicy.NewDependencyTransport(1)
		base.MaxConnsPerHost = 0
		base.MaxIdleConnsPerHost = 0
	}
	tr := &httppolicy.Transport{
		Base:             base,
		Policy:           p,
		IsFailure:        h.IsFailure,
		RetryUnsafe:      h.RetryUnsafe,
		FirstByteTimeout: h.FirstByteTimeout,
		IdleTimeout:      h.IdleTimeout,
		KeepaliveEvents:  h.KeepaliveEvents,
		Name:             name,
		MeterProvider:    pipeopt.Apply(opts).MeterProvider,
	}
	// Every response feeds the shared hold (nil without a RateLimit
	// section).
	tr.Signals = httppolicy.LimiterSignals(p.RateLimit())
	var rt http.RoundTripper = tr
	if h.Hedge != nil {
		rt = &httppolicy.Hedging{Base: tr, Hedge: h.Hedge, IsFailure: h.IsFailure}
	}
	return &Client{
		Client:   &http.Client{Transport: rt},
		Pipeline: p,
		base:     base,
	}, nil
}

// Close closes the client's idle connections and its Pipeline. It is safe
// on a nil Client and may be called more than once; the client keeps
// working afterwards, opening connections as it needs them.
func (c *Client) Close() error {
	if c == nil {
		return nil
	}
	if c.base != nil {
		c.base.CloseIdleConnections()
	}
	return c.Pipeline.Close()
}
