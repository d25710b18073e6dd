package httppolicy

import (
	"net"
	"net/http"
	"time"
)

// NewDependencyTransport returns an *http.Transport to use as
// [Transport.Base] behind a bulkhead of limit slots: a clone of
// [http.DefaultTransport] (or of its usual settings) with MaxConnsPerHost
// and MaxIdleConnsPerHost set to limit, and MaxIdleConns raised to limit
// if lower. So no admitted call waits unseen for a connection. Over
// HTTP/2 the bulkhead is the bound. It panics if limit < 1.
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
