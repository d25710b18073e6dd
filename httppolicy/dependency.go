package httppolicy

import (
	"net"
	"net/http"
	"time"
)

// NewDependencyTransport returns an *http.Transport for one dependency, to
// use as [Transport.Base] behind a bulkhead of limit slots: a clone of
// [http.DefaultTransport] (or, if that has been replaced by something that
// is not an *http.Transport, a transport with the same settings) with
// MaxConnsPerHost and MaxIdleConnsPerHost set to limit, and MaxIdleConns
// raised to limit if it was lower. The bulkhead then never admits more calls
// than the transport has connections for, so no call queues unseen inside
// the transport, and the connections the bulkhead's calls warm up stay open
// for the next ones.
//
// Behind a [Hedging], each hedged attempt takes a bulkhead slot of its
// own, so limit still bounds the requests in flight.
//
// Over HTTP/2 many requests share one connection, so MaxConnsPerHost does
// not bound the calls in flight there: the bulkhead does.
//
// It panics if limit < 1, a programmer error. The result is a new
// transport, safe for concurrent use; call CloseIdleConnections when done
// with it.
func NewDependencyTransport(limit int) *http.Transport {
	if limit < 1 {
		panic("httppolicy: NewDependencyTransport limit must be >= 1")
	}
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: 1 * time.Second,
		}
	}
	t.MaxConnsPerHost = limit
	t.MaxIdleConnsPerHost = limit
	if t.MaxIdleConns != 0 && t.MaxIdleConns < limit {
		t.MaxIdleConns = limit
	}
	return t
}
