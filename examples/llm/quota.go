package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
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

	// InMemory runs the fakes on an in-memory network (FakeConfig.InMemory):
	// for a test that runs the scenario in a testing/synctest bubble.
	InMemory bool
	// NoThrottle leaves the RateLimit section out of the watertight arms
	// (Limits.NoThrottle): a control, which misses the targets.
	NoThrottle bool
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
// latency over all calls. The sdk_ and wt_ keys are OpenAI's arms, the
// anthropic_ ones Anthropic's. It prints as the scenario's JSON line.
type QuotaResult struct {
	SDK429    int   `json:"sdk_429"`
	SDKOK     int   `json:"sdk_ok"`
	SDKFailed int   `json:"sdk_failed"`
	SDKP99    int64 `json:"sdk_p99_ms"`
	WT429     int   `json:"wt_429"`
	WTOK      int   `json:"wt_ok"`
	WTFailed  int   `json:"wt_failed"`
	WTP99     int64 `json:"wt_p99_ms"`

	AnthropicSDK429    int   `json:"anthropic_sdk_429"`
	AnthropicSDKOK     int   `json:"anthropic_sdk_ok"`
	AnthropicSDKFailed int   `json:"anthropic_sdk_failed"`
	AnthropicSDKP99    int64 `json:"anthropic_sdk_p99_ms"`
	AnthropicWT429     int   `json:"anthropic_wt_429"`
	AnthropicWTOK      int   `json:"anthropic_wt_ok"`
	AnthropicWTFailed  int   `json:"anthropic_wt_failed"`
	AnthropicWTP99     int64 `json:"anthropic_wt_p99_ms"`
}

// armResult is one arm's outcome.
type armResult struct {
	n429, ok, failed int
	p99              time.Duration
}

// RunQuota runs four arms at once, each against a fake of its own: for
// each of OpenAI and Anthropic, (a) the provider's SDK with its default
// retries (2, honouring Retry-After) and no watertight; (b) the SDK with
// its retries off, behind a watertight pipeline whose RateLimit section
// reads the provider's headers (no client-side rate).
func RunQuota(p QuotaParams) (QuotaResult, error) {
	cfg := FakeConfig{Service: p.Service, Quota: &p.Quota, InMemory: p.InMemory}
	var fakes [4]*Fake // openai sdk, openai wt, anthropic sdk, anthropic wt
	for i := range fakes {
		api := OpenAIAPI
		if i >= 2 {
			api = AnthropicAPI
		}
		fakes[i] = NewFake(api, cfg)
		defer fakes[i].Close()
	}
	// sdkHTTP is a plain client for an SDK's own arm, over a pool big
	// enough for every call in flight.
	sdkHTTP := func(f *Fake) *http.Client {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 1024
		if p.InMemory {
			base.DialContext = f.Dial
		}
		return &http.Client{Transport: base}
	}
	closeIdle := func(c *http.Client) { c.Transport.(*http.Transport).CloseIdleConnections() }

	// (a) Each SDK alone, its retries at their default.
	oaHTTP, anHTTP := sdkHTTP(fakes[0]), sdkHTTP(fakes[2])
	defer closeIdle(oaHTTP)
	defer closeIdle(anHTTP)
	oa := openai.NewClient(
		option.WithBaseURL(fakes[0].BaseURL()),
		option.WithAPIKey("sk-fake"),
		option.WithHTTPClient(oaHTTP),
	)
	oaCall := func(ctx context.Context) error {
		_, err := oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-fake",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		return err
	}
	an := anthropic.NewClient(
		aoption.WithBaseURL(fakes[2].BaseURL()),
		aoption.WithAPIKey("sk-ant-fake"),
		aoption.WithHTTPClient(anHTTP),
	)
	anCall := func(ctx context.Context) error {
		_, err := an.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "claude-fake",
			MaxTokens: 256,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
		})
		return err
	}

	// (b) The SDKs' retries off, behind watertight.
	l := quotaLimits(p)
	if p.InMemory {
		l.Dial = fakes[1].Dial
	}
	oaWT, err := NewOpenAI(fakes[1].BaseURL(), "sk-fake", l)
	if err != nil {
		return QuotaResult{}, err
	}
	defer oaWT.Close()
	if p.InMemory {
		l.Dial = fakes[3].Dial
	}
	anWT, err := NewAnthropic(fakes[3].BaseURL(), "sk-ant-fake", l)
	if err != nil {
		return QuotaResult{}, err
	}
	defer anWT.Close()
	complete := func(c Chat) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.Complete(ctx, "hi")
			return err
		}
	}

	calls := [4]func(context.Context) error{oaCall, complete(oaWT), anCall, complete(anWT)}
	var res [4]armResult
	var wg sync.WaitGroup
	for i := range res {
		wg.Go(func() { res[i] = runArm(p, calls[i]) })
	}
	wg.Wait()
	for i := range res {
		res[i].n429, _ = fakes[i].Counts()
	}
	a, b, c, d := res[0], res[1], res[2], res[3]
	return QuotaResult{
		SDK429: a.n429, SDKOK: a.ok, SDKFailed: a.failed, SDKP99: a.p99.Milliseconds(),
		WT429: b.n429, WTOK: b.ok, WTFailed: b.failed, WTP99: b.p99.Milliseconds(),
		AnthropicSDK429: c.n429, AnthropicSDKOK: c.ok, AnthropicSDKFailed: c.failed, AnthropicSDKP99: c.p99.Milliseconds(),
		AnthropicWT429: d.n429, AnthropicWTOK: d.ok, AnthropicWTFailed: d.failed, AnthropicWTP99: d.p99.Milliseconds(),
	}, nil
}

// quotaLimits sizes the watertight arms: no bulkhead limit to speak of
// (open-loop arrivals; a held call keeps its slot), the call's deadline,
// 3 tries, waits of at most 10 s.
func quotaLimits(p QuotaParams) Limits {
	return Limits{
		Slots: 4096, CallTimeout: p.Deadline,
		Attempts: 3, Backoff: 200 * time.Millisecond, MaxWait: 10 * time.Second,
		TripAfter: 5, OpenFor: 10 * time.Second,
		NoThrottle: p.NoThrottle,
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

// Check returns nil if r meets the scenario's targets, for each provider:
// watertight's arm drew at most half the 429s of the SDK's own retries,
// and succeeded at least as often, less 2% of all calls; otherwise an
// error saying which target was missed.
func (r QuotaResult) Check() error {
	var errs []error
	check := func(prefix string, sdk429, sdkOK, sdkFailed, wt429, wtOK int) {
		if 2*wt429 > sdk429 {
			errs = append(errs, fmt.Errorf("%swt_429 = %d, more than half of %ssdk_429 = %d", prefix, wt429, prefix, sdk429))
		}
		if calls := sdkOK + sdkFailed; 100*wtOK < 100*sdkOK-2*calls {
			errs = append(errs, fmt.Errorf("%swt_ok = %d, below %ssdk_ok = %d less 2%% of %d calls", prefix, wtOK, prefix, sdkOK, calls))
		}
	}
	check("", r.SDK429, r.SDKOK, r.SDKFailed, r.WT429, r.WTOK)
	check("anthropic_", r.AnthropicSDK429, r.AnthropicSDKOK, r.AnthropicSDKFailed, r.AnthropicWT429, r.AnthropicWTOK)
	return errors.Join(errs...)
}
