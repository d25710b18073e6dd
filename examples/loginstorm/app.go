package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/route"
)

// The app's modes, as in the seed's MODE environment variable.
const (
	modeShared   = "shared"   // chats go through one shared client with no limit
	modeBulkhead = "bulkhead" // chats go through their own compartment
	modePriority = "priority" // one server limit, logins critical and chats sheddable
	modeBreaker  = "breaker"  // the bulkhead's compartment, and a breaker that opens on slow calls
	modeRoute    = "route"    // chats routed over a slow upstream and a healthy one
	modeTenants  = "tenants"  // one tenant floods the chats' compartment, another sends a few: armFIFO and armFair
)

// The tenants mode's two arms, each an app mode of its own: the chats'
// compartment of bulkhead mode, keyed by tenant, without and with the fair
// share.
const (
	armFIFO = "fifo"       // first come first served, whoever the tenant
	armFair = "fair_share" // FairShare, and at most tenantCap slots per tenant
)

// The seed's numbers.
const (
	serverSlots    = 50                     // the platform's per-instance concurrency cap, for every route
	chatLimit      = 10                     // chats in flight to the upstream
	chatQueue      = 20                     // chats that may wait for one of them
	chatMaxWait    = time.Second            // how long one may wait
	chatRetryAfter = "2"                    // seconds, in the 503 answering a rejected chat
	serverQueue    = 50                     // priority mode: requests that may wait for a server slot
	serverMaxWait  = 500 * time.Millisecond // priority mode: how long one may wait
	loginReserve   = 20                     // priority mode: server slots only critical requests take
	sharedIdle     = 256                    // idle connections kept by the shared client, as Node's maxFreeSockets
	upstreamPath   = "/complete"            // the upstream's path, as in the seed
	modeHeader     = "Loginstorm-Mode"      // tells the load which mode answered
	defaultSlow    = 5 * time.Second        // breaker mode: a chat this long without an answer is slow
	healthyShare   = 15                     // route mode: the healthy upstream's delay is the slow one's over this, as 2 s is to 30 s
	routeHealthy   = 40                     // route mode: chats in flight to the healthy upstream
	upstreamHeader = "Loginstorm-Upstream"  // route mode: which upstream answered a chat
	tenantHeader   = "Loginstorm-Tenant"    // tenants mode: whom a chat is for
)

// upstreams are the app's upstreams: slow, and in route mode healthy.
type upstreams struct{ slow, healthy string }

// app is the service under test: /login answers at once, /chat calls the
// slow upstream; every request first takes one of serverSlots slots. It is
// safe for concurrent use; Close it when done.
type app struct {
	mode     string
	upstream string
	handler  http.Handler
	chat     *http.Client
	hosts    map[string]string // route mode: the upstreams' names by host
	// closers free what the app holds: bulkhead gauges, idle connections.
	closers []func()
}

// newApp builds the app for mode, calling the upstream at upstreamURL.
//
// Both modes put every route behind a watertight bulkhead of serverSlots
// slots with an unbounded queue and no patience, standing in for a
// platform's per-instance cap (Cloud Run's concurrency, a proxy's connection
// cap): a request that finds every slot taken waits, in FIFO order, for as
// long as it takes.
//
// In shared mode /chat calls the upstream through one client whose
// transport has no limit per host, like Node's global agent: nothing stops a
// slow dependency from holding every server slot.
//
// In bulkhead mode /chat calls it through an httppolicy.Transport whose
// policy is a bulkhead of chatLimit in flight, chatQueue waiting and
// chatMaxWait patience, over a transport capped at chatLimit connections: a
// chat that cannot get in fast is answered 503 with Retry-After and gives
// its server slot back.
//
// In priority mode /chat calls the upstream as in shared mode, with no
// bulkhead of its own. Instead the server slots know each route's
// priority: /login is critical, /chat sheddable. loginReserve of the slots
// are kept for critical requests, serverQueue requests may wait for
// serverMaxWait, and a login finding the queue full takes a chat's place:
// a chat turned away is answered 503 with Retry-After.
//
// In breaker mode /chat calls it as in bulkhead mode, with a breaker under
// the bulkhead whose slow rule opens it once half of at least 5 chats have
// run slow (0: 5 s) without an answer: the chats that come then are
// answered 503 at once, instead of taking the slots the slow ones free.
// It stays open 2 x slow, then lets one chat through to probe.
//
// In route mode /chat calls two equivalent upstreams, up.slow and
// up.healthy, through a watertight.Client that routes each chat to one of
// them: at most chatLimit chats in flight to the slow one, as in bulkhead
// mode, and routeHealthy to the healthy one; the slow one, once seen to be
// slow, is ejected and gets one probe each fifth of slow (0: 5 s). A chat
// neither can take is answered 503 with Retry-After.
//
// In armFIFO and armFair, the two arms of tenants mode, /chat calls it as
// in bulkhead mode, and each request carries its tenant (tenantOf) as its
// key. In armFIFO the chats' compartment ignores the key: first come first
// served. In armFair it serves its waiters tenant by tenant (FairShare),
// and no tenant holds more than tenantCap of its chatLimit slots
// (MaxPerKey), so that the others always find room.
func newApp(mode string, up upstreams, slow time.Duration) (*app, error) {
	a := &app{mode: mode, upstream: up.slow + upstreamPath}
	cfg := bulkhead.Config{Name: "server", Limit: serverSlots, MaxQueue: bulkhead.Unbounded}
	var hcfg httppolicy.HandlerConfig
	switch mode {
	case modePriority:
		cfg.MaxQueue, cfg.MaxWait = serverQueue, serverMaxWait
		cfg.Reserve = map[policy.Priority]int{policy.PriorityCritical: loginReserve}
		hcfg = httppolicy.HandlerConfig{RetryAfter: 2 * time.Second, Priority: routePriority}
	case armFIFO, armFair:
		// The key goes into every request's ctx, which /chat passes on to
		// the chats' compartment.
		hcfg.Key = tenantOf
	}
	slots, err := bulkhead.New(cfg)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { slots.Close() })

	switch mode {
	case modeShared, modePriority:
		// A clone of the default transport: MaxConnsPerHost 0 (no limit,
		// so nothing queues in it) and enough idle connections that the
		// ones the first wave opened are reused rather than churned (the
		// default keeps 2 per host, which queues nothing but redials).
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = 0
		tr.MaxIdleConns = sharedIdle
		tr.MaxIdleConnsPerHost = sharedIdle
		a.chat = &http.Client{Transport: tr}
		a.closers = append(a.closers, tr.CloseIdleConnections)
	case modeRoute:
		if err := a.routeClient(up, cmp.Or(slow, defaultSlow)); err != nil {
			slots.Close()
			return nil, err
		}
	case modeBulkhead, modeBreaker, armFIFO, armFair:
		pol, closers, err := chatPolicy(mode, cmp.Or(slow, defaultSlow))
		if err != nil {
			slots.Close()
			return nil, err
		}
		base := httppolicy.NewDependencyTransport(chatLimit)
		a.chat = &http.Client{Transport: &httppolicy.Transport{Base: base, Policy: pol}}
		a.closers = append(a.closers, closers...)
		a.closers = append(a.closers, base.CloseIdleConnections)
	default:
		slots.Close()
		return nil, fmt.Errorf("loginstorm: mode must be %q, %q, %q, %q or %q, got %q", modeShared, modeBulkhead, modePriority, modeBreaker, modeRoute, mode)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/login", a.login)
	mux.HandleFunc("/chat", a.chatHandler)
	// In shared and bulkhead modes the server slots never reject
	// (unbounded queue, no MaxWait), so Handler's 503 is never used: it is
	// the slot-per-request that matters.
	a.handler = httppolicy.Handler(slots, mux, hcfg)
	return a, nil
}

// chatPolicy returns the chats' policy in bulkhead or breaker mode, or in
// an arm of tenants mode, and what closes it.
func chatPolicy(mode string, slow time.Duration) (policy.Policy, []func(), error) {
	cfg := bulkhead.Config{Name: "llm", Limit: chatLimit, MaxQueue: chatQueue, MaxWait: chatMaxWait}
	if mode == armFair {
		cfg.FairShare, cfg.MaxPerKey = true, tenantCap
	}
	llm, err := bulkhead.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	closers := []func(){func() { llm.Close() }}
	if mode != modeBreaker {
		return llm, closers, nil
	}
	br, err := breaker.New(breaker.Config{Name: "llm", SlowCallDuration: slow, SlowCallRatio: 0.5,
		SlowCallMinCalls: 5, Window: 6 * slow, OpenTimeout: 2 * slow})
	if err != nil {
		llm.Close()
		return nil, nil, err
	}
	closers = append(closers, func() { br.Close() })
	pipe, err := compose.New("llm", compose.Policies{Bulkhead: llm, Breaker: br})
	if err != nil {
		llm.Close()
		br.Close()
		return nil, nil, err
	}
	return pipe, closers, nil
}

// routeClient sets the chats' client in route mode.
func (a *app) routeClient(up upstreams, slow time.Duration) error {
	if up.healthy == "" {
		return errors.New("loginstorm: route mode needs a healthy upstream")
	}
	a.upstream = "http://llm.invalid" + upstreamPath // each endpoint's URL replaces the host
	c, err := watertight.NewHTTPClient("llm", watertight.Config{Route: &route.Config{ProbeInterval: slow / 5}},
		watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
			{Endpoint: route.Endpoint{Name: "slow", MaxConcurrent: chatLimit}, BaseURL: up.slow},
			{Endpoint: route.Endpoint{Name: "healthy", MaxConcurrent: routeHealthy}, BaseURL: up.healthy},
		}})
	if err != nil {
		return err
	}
	a.hosts = map[string]string{}
	for name, u := range map[string]string{"slow": up.slow, "healthy": up.healthy} {
		if pu, err := url.Parse(u); err == nil {
			a.hosts[pu.Host] = name
		}
	}
	a.chat = c.Client
	a.closers = append(a.closers, func() { c.Close() })
	return nil
}

// tenantOf is the tenant a request is for, in tenants mode: the key the
// chats' compartment shares its slots by. A real service takes it from what
// the request proved (a verified token, a client certificate), never from
// a header a client merely sends, unless that client is trusted: any
// client could claim any tenant's share. The demo's load is trusted.
func tenantOf(r *http.Request) string { return r.Header.Get(tenantHeader) }

// routePriority is the priority of a request in priority mode.
func routePriority(r *http.Request) policy.Priority {
	if r.URL.Path == "/login" {
		return policy.PriorityCritical
	}
	return policy.PrioritySheddable
}

// Close frees the bulkheads' gauges and closes idle upstream connections.
// Call it once the app's server is closed.
func (a *app) Close() {
	for _, c := range a.closers {
		c()
	}
}

// login does no work at all: it only needs a server slot.
func (a *app) login(w http.ResponseWriter, _ *http.Request) {
	w.Header()[modeHeader] = []string{a.mode}
	io.WriteString(w, "ok\n")
}

// chatHandler relays one upstream answer: 200 with its body, 503 with
// Retry-After when the chat bulkhead turned the call away, 502 on any other
// failure.
func (a *app) chatHandler(w http.ResponseWriter, r *http.Request) {
	w.Header()[modeHeader] = []string{a.mode}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, a.upstream, nil)
	if err != nil {
		http.Error(w, "upstream error", http.StatusBadGateway)
		return
	}
	resp, err := a.chat.Do(req)
	if err != nil {
		if errors.Is(err, policy.ErrRejected) {
			w.Header().Set("Retry-After", chatRetryAfter)
			http.Error(w, "llm busy", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "upstream error", http.StatusBadGateway)
		return
	}
	if name := a.hosts[resp.Request.URL.Host]; name != "" {
		w.Header().Set(upstreamHeader, name)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		http.Error(w, "upstream error", http.StatusBadGateway)
		return
	}
	w.Write(body)
}
