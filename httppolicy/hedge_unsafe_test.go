package httppolicy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// holdAttempt stands for a policy between the hedge and the Transport (a
// rate limiter in the RateLimit slot) that holds attempt 1 for a while
// before it reaches fn, and takes a while to return a failure (a breaker's
// hook, say).
type holdAttempt struct{ hold, after time.Duration }

func (h holdAttempt) Execute(ctx context.Context, fn policy.Func) error {
	if retry.Attempt(ctx) == 1 {
		time.Sleep(h.hold)
	}
	err := fn(ctx)
	if err != nil && h.after > 0 {
		time.Sleep(h.after)
	}
	return err
}

// A POST without an Idempotency-Key answered 500 may not be retried. The
// hedge starts attempt 2 while attempt 1 is held up before the Transport:
// attempt 2 sends and claims, attempt 1 reaches the Transport and waits for
// it. When the 500 comes, attempt 1 must not send the POST again, whether
// the failure reaches the hedge at once or late; the caller gets the 500,
// and a breaker below the hedge counts one failure (the waiter's outcome
// is excluded, as context.Canceled).
func TestHedgePostNotResentAfterPermanentFailure(t *testing.T) {
	for _, after := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
				time.Sleep(10 * time.Millisecond)
				resp, _ := fedResponse(req, 500, "", false, step{0, "boom"})
				return resp, nil, nil
			}}
			seen := &outcomes{}
			tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{
				Retry:     newHedge(t, time.Millisecond, 2, nil),
				RateLimit: holdAttempt{hold: 5 * time.Millisecond, after: after},
				Breaker:   seen,
			})}
			req, _ := http.NewRequest("POST", "http://dep.test/", strings.NewReader("charge $100"))
			resp, err := tr.RoundTrip(req)
			var code int
			switch {
			case err == nil:
				code = resp.StatusCode
				resp.Body.Close()
			default:
				if se, ok := errors.AsType[*httppolicy.StatusError](err); ok {
					code = se.StatusCode
				}
			}
			synctest.Wait()
			time.Sleep(time.Second)
			synctest.Wait()
			if n := base.count(); n != 1 {
				t.Errorf("after=%v: the POST reached the server %d times, want 1", after, n)
			}
			if code != 500 {
				t.Errorf("after=%v: RoundTrip = %v, %v; want the 500", after, resp, err)
			}
			counted := 0
			for _, e := range seen.get() {
				if e != nil && !errors.Is(e, context.Canceled) {
					counted++
				}
			}
			if counted != 1 {
				t.Errorf("after=%v: a breaker counted %d failures (%v), want 1", after, counted, seen.get())
			}
		})
	}
}

// loserBug stands for a bug in a base transport on its cancel path.
func loserBug() {
	var m map[string]int
	m["bug"]++
}

// A panic in a losing attempt is reported to otel.Handle with the stack of
// the goroutine that panicked, which names the function that did: the
// panic is not re-raised, so nothing else shows where it came from.
func TestHedgeLoserPanicReportedWithStack(t *testing.T) {
	rec := &handled{}
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(rec)
	defer otel.SetErrorHandler(prev)
	synctest.Test(t, func(t *testing.T) {
		base := &feedBase{fn: func(n int, req *http.Request) (*http.Response, *feedBody, error) {
			if n == 1 {
				<-req.Context().Done()
				loserBug()
			}
			resp, b := fedResponse(req, 204, "", false)
			b.Close()
			resp.Body = http.NoBody
			return resp, nil, nil
		}}
		tr := &httppolicy.Transport{Base: base, Policy: newPipeline(t, compose.Policies{Retry: newHedge(t, 10*time.Millisecond, 1, nil)})}
		resp, err := get(t, tr, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		synctest.Wait()
	})
	errs := rec.get()
	if len(errs) != 1 {
		t.Fatalf("otel.Handle got %v, want the loser's panic", errs)
	}
	msg := errs[0].Error()
	if !strings.Contains(msg, "httppolicy: panic in an attempt that lost to another's: assignment to entry in nil map") ||
		!strings.Contains(msg, "httppolicy_test.loserBug") || !strings.Contains(msg, "goroutine ") {
		t.Errorf("otel.Handle got %q, want the panic with its stack", msg)
	}
}
