package httppolicy

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/watertight/watertight/policy"
)

// DefaultIsFailure is the IsFailure used when a Transport's or a
// Hedging's is nil. A response is a failure if its status is 5xx, 408 or
// 429. A nil response is not. How a Transport treats each attempt:
//
//	attempt                    failure   may be retried
//	status 429 or 503          yes       yes
//	other 5xx, 408             yes       if idempotent
//	any other status           no        -
//	connection refused         yes       yes
//	other transport error      yes       if idempotent
//	first byte timeout         yes       if idempotent
//
// With RetryUnsafe, a Transport retries any request as an idempotent one.
// A request whose body cannot be sent again is never retried.
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
// act on the request.
func unprocessedStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
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

// Is reports whether target is [policy.ErrThrottled] and the status is
// 429. A breaker's default classification does not count such errors.
func (e *StatusError) Is(target error) bool {
	return target == policy.ErrThrottled && e.StatusCode == http.StatusTooManyRequests
}

// RetryAfter returns RetryAfterDelay. Package retry uses it as the next
// wait.
func (e *StatusError) RetryAfter() time.Duration { return e.RetryAfterDelay }

// ErrorType returns the status code as a string, such as "503".
func (e *StatusError) ErrorType() string { return strconv.Itoa(e.StatusCode) }
