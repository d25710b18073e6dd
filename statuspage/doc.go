// Package statuspage serves the live state of watertight pipelines: an
// HTML page, rendered on the server with html/template, that works
// without JavaScript and asks the browser to load it again every few
// seconds, and the same state as JSON for scripts and curl. Mount it
// behind your service's own authentication, as net/http/pprof's handlers:
//
//	page, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{chat, login}})
//	if err != nil { ... }
//	defer page.Close()
//	mux.Handle("/debug/watertight", page)
//
// It is a module of its own, github.com/watertight/watertight/statuspage,
// so that a service that does not mount it does not build it.
//
// The page shows the pipelines handed to it, and nothing else: there is
// no registry. For each, the policy in each slot: a bulkhead's or an
// adaptive limit's limit, calls in flight and waiting by priority; a
// breaker's state, until when it is open, and its counts while closed; a
// rate limit's hold and rates; a retry's attempts and its budget's
// balance; a deadline's timeout; a keyed group's live keys and its
// MaxKeys, counted (the keys themselves, its callers' input, are never
// shown); each route endpoint's latency, load and whether it is out or
// ejected. Also the calls rejected in the last
// minute, by policy and reason, with a sparkline of them second by
// second. A policy of another type shows its type.
//
// # Cost
//
// A page counts its pipelines' rejections (compose's CountRejections). A
// call that succeeds pays nothing for it, whether a page was built or
// not; a call that fails pays an atomic load, and, once a page counts,
// if rejected, a map read and an atomic add. A goroutine samples them once a
// second until [Page.Close]. Rendering reads the slots' numbers, a
// rate limit's hold, a route's endpoints and the rejections from atomics,
// and never waits on a call. It reads a breaker's counts and a retry
// budget's balance under the short locks each outcome takes to be counted.
//
// # Changing settings
//
// Read-only by default: a POST is refused with 405. With
// Options.AllowUpdates, each *watertight.Pipeline gets a form with its
// settings as JSON; a POST of it runs Pipeline.Update. A POST must carry
// the token the page put in its form, and come from the page's own origin
// (http.CrossOriginProtection): a page of another site cannot post it.
package statuspage
