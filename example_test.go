package watertight_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// One pipeline per dependency, from one value: at most 10 calls in flight
// and 20 waiting up to a second, 30 s for the whole call, 3 attempts of at
// most 10 s each, and a breaker with its defaults.
func Example() {
	p, err := watertight.New("llm", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10, MaxQueue: 20, MaxWait: time.Second},
		Deadline: &deadline.Config{Timeout: 30 * time.Second},
		Retry:    &retry.Config{MaxAttempts: 3},
		Breaker:  &breaker.Config{},
		Attempt:  &deadline.Config{Timeout: 10 * time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	answer, err := policy.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		return fmt.Sprintf("answered on attempt %d", retry.Attempt(ctx)), nil
	})
	fmt.Println(answer, err)

	// Once the breaker is open, calls are refused at once, and the refusal
	// names the policy (the section took the pipeline's name) and the reason.
	p.Breaker().ForceOpen()
	err = p.Execute(context.Background(), func(ctx context.Context) error { return nil })
	var rej *policy.RejectedError
	if errors.As(err, &rej) {
		fmt.Println(errors.Is(err, policy.ErrRejected), rej.Kind, rej.Name, rej.Reason)
	}
	// Output:
	// answered on attempt 1 <nil>
	// true breaker llm open
}

// An invalid section is named in the error, which wraps the policy's own.
func ExampleNew_invalid() {
	_, err := watertight.New("llm", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 0},
	})
	fmt.Println(err)
	_, err = watertight.New("llm", watertight.Config{
		Deadline: &deadline.Config{Timeout: time.Second},
		Attempt:  &deadline.Config{Timeout: 2 * time.Second},
	})
	fmt.Println(err)
	// Output:
	// watertight: Bulkhead: Config.Limit must be >= 1, got 0
	// watertight: Attempt: Timeout 2s is longer than the Deadline's Timeout 1s
}

// An HTTP client whose every request runs through the pipeline: hand
// c.Client to an SDK (option.WithHTTPClient) or call it directly. Here the
// server fails twice with 503 and the retries get its answer.
func ExampleNewHTTPClient() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	c, err := watertight.NewHTTPClient("api", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 4},
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
		Retry:    &retry.Config{MaxAttempts: 3, InitialInterval: time.Millisecond},
	}, watertight.HTTPOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	resp, err := c.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", calls, "calls")
	// Output: 200 hello after 3 calls
}
