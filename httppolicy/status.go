package httppolicy

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/watertight/watertight/policy"
)

// ErrBodyTruncated is returned, after the first [MaxFailureBody] bytes, by
// the body of a failure response (one that [Transport.IsFailure] flagged)
// whose body was longer than that: such bodies are read into memory when
// they arrive, so that the connection can be reused and the response
// returned after the policy's contexts have ended.
var ErrBodyTruncated = errors.New("httppolicy: failure response body truncated")

// MaxFailureBody is the number of bytes of a failure response's body that a
// [Transport] keeps in memory; see [ErrBodyTruncated].
const MaxFailureBody = 64 << 10

// DefaultIsFailure is the classification a [Transport] uses when
// IsFailure is nil: a response is a failure of the dependency if its status
// is 5xx, 408 Request Timeout or 429 Too Many Requests. A nil response is not
// a failure. It is safe for concurrent use.
func DefaultIsFailure(resp *http.Response) bool {
	return resp != nil && isFailureStatus(resp.StatusCode)
}

func isFailureStatus(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// StatusError is the error an attempt fails with when the server answered
// with a failure status: it is what the retry and breaker policies see, so
// that a 503 counts as a failure like a broken connection does. A 429's
// matches [policy.ErrThrottled] with [errors.Is], so the breaker's default
// classification does not count it (see [StatusError.Is]). A
// [Transport] never returns one to its caller: when the retries end on a
// failure status, the caller gets that last response itself, with a nil
// error, or, if the request's context is done, the context's error. Inside
// a policy (an OnRetry hook, a breaker's IsFailure) use
// [errors.As] to find it. On the server side ([Handler]) Response is nil and
// StatusCode is the status the handler wrote.
//
// A StatusError is not modified after it is created; it may be read from
// several goroutines. Its zero value is a valid error with status 0.
type StatusError struct {
	// Response is the failure response (client side), its body already
	// read into memory; nil on the server side. Do not close or read it
	// from a policy hook: the Transport owns it.
	Response *http.Response
	// StatusCode is the response's status code.
	StatusCode int
	// RetryAfterDelay is the wait the server asked for (see
	// [ParseRetryAfter]), or 0 if it asked for none.
	RetryAfterDelay time.Duration
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

// Is reports whether target is [policy.ErrThrottled] and the status is 429
// Too Many Requests: the provider's flow control, which a breaker's default
// classification does not count as a failure. Any other status, 503
// included, matches nothing.
func (e *StatusError) Is(target error) bool {
	return target == policy.ErrThrottled && e.StatusCode == http.StatusTooManyRequests
}

// RetryAfter returns RetryAfterDelay. Package retry uses it as the wait
// before the next attempt when it is positive, and gives up at once if it
// is longer than the retry's MaxInterval or would pass the deadline.
func (e *StatusError) RetryAfter() time.Duration { return e.RetryAfterDelay }

// ErrorType returns the status code as a string ("503"), the error.type
// OpenTelemetry's HTTP conventions record for a failure status.
func (e *StatusError) ErrorType() string { return strconv.Itoa(e.StatusCode) }
