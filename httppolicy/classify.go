package httppolicy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/watertight/watertight/policy"
)

// DefaultIsFailure is the IsFailure used when a Transport's or a
// Hedging's is nil. A response is a failure if its status is 5xx, 408 or
// 429. A nil response is not. How a Transport treats each attempt, the
// first row that applies deciding:
//
//	attempt                          class        may be retried   the policies see
//	status 402, or 429 whose JSON    spent quota  no               *StatusError matching policy.ErrQuotaSpent
//	  error has type or code
//	  insufficient_quota or
//	  billing_error
//	status 429                       throttled    yes              *StatusError matching policy.ErrThrottled
//	status 503 or 529 (overloaded)   failure      yes              *StatusError
//	other 5xx, 408                   failure      if idempotent    *StatusError
//	any other status                 success      -                nil
//	connection refused               failure      yes              the error
//	other transport error            failure      if idempotent    the error
//	first byte timeout               failure      if idempotent    the error
//
// A spent quota is classified first, whatever IsFailure says: the caller
// gets the response at once, with the header X-Should-Retry: false, and
// Signals never see it, so it sets no rate-limit hold. Its JSON error is
// read from the first MaxFailureBody bytes of a 429's body, which the
// Transport keeps in memory, as encoding/json decodes the first JSON value
// there (field names in any case); a body that does not decode leaves the
// 429 throttled. With RetryUnsafe, a Transport retries any request as an
// idempotent one. A request whose body cannot be sent again is never
// retried.
func DefaultIsFailure(resp *http.Response) bool {
	if resp == nil {
		return false
	}
	code := resp.StatusCode
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// idempotentMethod reports whether method is idempotent by RFC 9110.
func idempotentMethod(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// idempotent reports whether req may be sent twice with the effect of
// once: an idempotent method, or an idempotency key, as net/http reads it.
func idempotent(req *http.Request) bool {
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return idempotentMethod(req.Method) || key || xkey
}

// unprocessedStatus reports whether the status says the server did not
// act on the request: 529 is Anthropic's "overloaded".
func unprocessedStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == 529
}

// spentError returns the error of resp, a spent quota, and sets
// X-Should-Retry: false on it.
func spentError(resp *http.Response) *StatusError {
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	resp.Header.Set("X-Should-Retry", "false")
	se := newStatusError(resp)
	se.quota = true
	return se
}

// mayBeSpent reports whether a response of status code may be a spent
// quota.
func mayBeSpent(code int) bool {
	return code == http.StatusPaymentRequired || code == http.StatusTooManyRequests
}

// quotaSpent reports whether resp, whose body is in memory, is a spent
// quota: a 402, or a 429 whose JSON error has the type or code of one, as
// OpenAI's and Anthropic's are:
//
//	{"error": {"type": "insufficient_quota", "code": "insufficient_quota", ...}}
//	{"type": "error", "error": {"type": "billing_error", ...}}
func quotaSpent(resp *http.Response) bool {
	if resp.StatusCode == http.StatusPaymentRequired {
		return true
	}
	b, ok := resp.Body.(memBody)
	if !ok || b.err != nil { // truncated: not a JSON error
		return false
	}
	var body struct {
		Error struct{ Type, Code any }
	}
	if json.NewDecoder(io.NewSectionReader(b.Reader, 0, b.Size())).Decode(&body) != nil {
		return false
	}
	for _, v := range [2]any{body.Error.Type, body.Error.Code} {
		if v == "insufficient_quota" || v == "billing_error" {
			return true
		}
	}
	return false
}

// ErrBodyTruncated ends the body of a failure response after its first
// [MaxFailureBody] bytes.
var ErrBodyTruncated = errors.New("httppolicy: failure response body truncated")

// MaxFailureBody is how many bytes of a failure response's body a
// [Transport] keeps in memory.
const MaxFailureBody = 64 << 10

// StatusError is the error of an attempt answered with a failure status.
// The policies see it; a [Transport]'s caller never does. Use
// [errors.As] to find it in a policy hook. On the server side ([Handler])
// Response is nil.
//
// A StatusError is not modified after it is created. Its zero value is
// an error with status 0.
type StatusError struct {
	// Response is the failure response, its body in memory. Do not close
	// or read it from a policy hook.
	Response *http.Response
	// StatusCode is the response's status code.
	StatusCode int
	// RetryAfterDelay is the wait the server asked for, or 0.
	RetryAfterDelay time.Duration

	quota bool // a spent quota
}

func newStatusError(resp *http.Response) *StatusError {
	d, _ := ParseRetryAfter(resp.Header, time.Now())
	return &StatusError{Response: resp, StatusCode: resp.StatusCode, RetryAfterDelay: d}
}

// Error returns a message such as
// "httppolicy: response status 503 Service Unavailable".
func (e *StatusError) Error() string {
	msg := "httppolicy: response status " + strconv.Itoa(e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		msg += " " + text
	}
	return msg
}

// Is reports whether target is [policy.ErrQuotaSpent] and the answer is a
// spent quota (see [DefaultIsFailure]), or target is [policy.ErrThrottled]
// and the answer is another 429. A breaker's default classification counts
// neither.
func (e *StatusError) Is(target error) bool {
	if e.quota {
		return target == policy.ErrQuotaSpent
	}
	return target == policy.ErrThrottled && e.StatusCode == http.StatusTooManyRequests
}

// RetryAfter returns RetryAfterDelay. Package retry uses it as the next
// wait.
func (e *StatusError) RetryAfter() time.Duration { return e.RetryAfterDelay }

// ErrorType returns the status code as a string, such as "503".
func (e *StatusError) ErrorType() string { return strconv.Itoa(e.StatusCode) }
