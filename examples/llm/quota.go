package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// QuotaParams sets up the quota scenario: a provider rationing requests
// and tokens, asked at a steady rate above its quota.
type QuotaParams struct {
	Duration time.Duration // how long calls keep arriving (60s)
	Rate     float64       // calls arriving per second, open loop (15)
	Deadline time.Duration // each call's deadline, retries included (20s)
	Service  time.Duration // the fake's time to answer one request (200ms)
	Quota    Quota         // 60 requests and 60 000 tokens per 6s, 1 000 a call
}

// DefaultQuotaParams are the figures: 15 calls/s for 60 s against
// 60 requests and 60 000 tokens per 6 s (10 calls/s), 20 s per call.
func DefaultQuotaParams() QuotaParams {
	return QuotaParams{
		Duration: 60 * time.Second, Rate: 15, Deadline: 20 * time.Second, Service: 200 * time.Millisecond,
		Quota: Quota{Requests: 60, Tokens: 60000, Window: 6 * time.Second, CallTokens: 1000},
	}
}

// QuotaResult is what each arm got: the 429s the fake sent it, the calls
// that succeeded and failed (returned an error), and the 99th percentile
// latency over all calls. It prints as the scenario's JSON line.
type QuotaResult struct {
	SDK429    int   `json:"sdk_429"`
	SDKOK     int   `json:"sdk_ok"`
	SDKFailed int   `json:"sdk_failed"`
	SDKP99    int64 `json:"sdk_p99_ms"`
	WT429     int   `json:"wt_429"`
	WTOK      int   `json:"wt_ok"`
	WTFailed  int   `json:"wt_failed"`
	WTP99     int64 `json:"wt_p99_ms"`
}

// armResult is one arm's outcome.
type armResult struct {
	n429, ok, failed int
	p99              time.Duration
}

// RunQuota runs both arms at once, each against a fake of its own: (a)
// openai-go with its default retries (2, honouring Retry-After) and no
// watertight; (b) openai-go with its retries off, behind a watertight
// pipeline whose RateLimit section reads the provider's headers (no
// client-side rate).
func RunQuota(p QuotaParams) (QuotaResult, error) {
	cfg := FakeConfig{Service: p.Service, Quota: &p.Quota}
	sdkFake, wtFake := NewFake(OpenAIAPI, cfg), NewFake(OpenAIAPI, cfg)
	defer sdkFake.Close()
	defer wtFake.Close()

	// (a) The SDK alone, over a pool big enough for every call in flight.
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 1024
	defer base.CloseIdleConnections()
	sdk := openai.NewClient(
		option.WithBaseURL(sdkFake.BaseURL()),
		option.WithAPIKey("sk-fake"),
		option.WithHTTPClient(&http.Client{Transport: base}),
	)
	sdkCall := func(ctx context.Context) error {
		_, err := sdk.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-fake",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		return err
	}

	// (b) The SDK's retries off, behind watertight.
	wt, err := NewOpenAI(wtFake.BaseURL(), "sk-fake", quotaLimits(p))
	if err != nil {
		return QuotaResult{}, err
	}
	defer wt.Close()
	wtCall := func(ctx context.Context) error {
		_, err := wt.Complete(ctx, "hi")
		return err
	}

	var a, b armResult
	var wg sync.WaitGroup
	wg.Go(func() { a = runArm(p, sdkCall) })
	wg.Go(func() { b = runArm(p, wtCall) })
	wg.Wait()
	a.n429, _ = sdkFake.Counts()
	b.n429, _ = wtFake.Counts()
	return QuotaResult{
		SDK429: a.n429, SDKOK: a.ok, SDKFailed: a.failed, SDKP99: a.p99.Milliseconds(),
		WT429: b.n429, WTOK: b.ok, WTFailed: b.failed, WTP99: b.p99.Milliseconds(),
	}, nil
}

// quotaLimits sizes the watertight arm: no bulkhead limit to speak of
// (open-loop arrivals; a held call keeps its slot), the call's deadline,
// 3 tries, waits of at most 10 s.
func quotaLimits(p QuotaParams) Limits {
	return Limits{
		Slots: 4096, CallTimeout: p.Deadline,
		Attempts: 3, Backoff: 200 * time.Millisecond, MaxWait: 10 * time.Second,
		TripAfter: 5, OpenFor: 10 * time.Second,
	}
}

// runArm starts call at p.Rate per second for p.Duration, each with
// p.Deadline, without waiting for earlier calls (open loop), and returns
// once every call has ended.
func runArm(p QuotaParams, call func(context.Context) error) armResult {
	n := int(p.Duration.Seconds() * p.Rate)
	lat := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / p.Rate * float64(time.Second)))))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.Deadline)
			defer cancel()
			t := time.Now()
			errs[i] = call(ctx)
			lat[i] = time.Since(t)
		})
	}
	wg.Wait()
	var r armResult
	for _, err := range errs {
		if err == nil {
			r.ok++
		} else {
			r.failed++
		}
	}
	slices.Sort(lat)
	if n > 0 {
		r.p99 = lat[(n*99-1)/100]
	}
	return r
}

// Check returns nil if r meets the scenario's targets: watertight's arm
// drew at most half the 429s of the SDK's own retries, and succeeded at
// least as often, less 2% of all calls; otherwise an error saying which
// target was missed.
func (r QuotaResult) Check() error {
	var errs []error
	if 2*r.WT429 > r.SDK429 {
		errs = append(errs, fmt.Errorf("wt_429 = %d, more than half of sdk_429 = %d", r.WT429, r.SDK429))
	}
	if calls := r.SDKOK + r.SDKFailed; 100*r.WTOK < 100*r.SDKOK-2*calls {
		errs = append(errs, fmt.Errorf("wt_ok = %d, below sdk_ok = %d less 2%% of %d calls", r.WTOK, r.SDKOK, calls))
	}
	return errors.Join(errs...)
}
