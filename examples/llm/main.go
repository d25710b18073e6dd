// Command llm wraps the openai-go v3 and anthropic-sdk-go v2 clients in
// watertight pipelines, one per provider, OpenAI first and Anthropic when
// OpenAI is down or throttled, and runs them against local fake providers
// that can be made slow, rate-limited, failing, hung or stalled:
//
//	cd examples/llm && go run .              # the demo
//	cd examples/llm && go run . quota -json  # measured: a provider's quota
//	cd examples/llm && go run . stall -json  # measured: stalls, late first tokens
//
// Each provider's SDK gets option.WithHTTPClient with the client of
// watertight.NewHTTPClient, so every HTTP exchange (a streamed body
// included) is one Execute of that provider's pipeline: bulkhead, deadline,
// retry, rate limit (fed by the provider's headers), breaker, with
// first-byte and idle timeouts on the stream. The SDKs' own retries are off
// (option.WithMaxRetries(0)) so that ours alone decide.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
)

// scenarios are the demo's parts, run in order.
var scenarios = []struct {
	title string
	run   func() error
}{
	{"1. Both providers healthy", healthy},
	{"2. A slow provider fills its own bulkhead only", slowProvider},
	{"3. Retry-After is honoured", retryAfter},
	{"4. The breaker opens on a failing provider and closes when it recovers", breakerCycle},
	{"5. A stream holds its slot until it ends", streamSlot},
	{"6. A hung provider is cut by the attempt deadline", hung},
	{"7. OpenAI, else Anthropic; never after part of the answer", fallbackDemo},
}

// command is what the command line asks for: the demo (name ""), or one
// of the measured scenarios.
type command struct {
	name     string        // "", "quota" or "stall"
	json     bool          // -json: end with one JSON object on the last line
	duration time.Duration // quota -duration: how long calls arrive
}

const usage = `Usage: go run . [quota|stall] [-json] [-duration d]   (from examples/llm)

Runs the openai-go and anthropic-sdk-go clients, each through a watertight
pipeline, against local fake providers. It needs no API key or network.

With no subcommand, it runs these scenarios:
%s
Subcommands (measured; -json prints one JSON object on the last line):
  quota   15 calls/s for 60 s against a provider allowing 60 requests and
          60 000 tokens per 6 s (1 000 a call), 20 s per call: openai-go
          and anthropic-sdk-go, each with its own retries against itself
          behind watertight reading the rate-limit headers, side by side
          (about 75 s)
  stall   streams that stop sending tokens while keepalives flow (both
          styles), cut by the idle timeout, and streams whose first token
          is late on one replica, retried on a healthy one (a few seconds)

Flags:
`

// parseArgs parses the command line: an optional subcommand (quota or
// stall), then -json and, for quota, -duration. -h prints the usage to
// stderr and returns flag.ErrHelp.
func parseArgs(args []string, stderr io.Writer) (command, error) {
	var cmd command
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd.name, args = args[0], args[1:]
		if cmd.name != "quota" && cmd.name != "stall" {
			return cmd, fmt.Errorf("unknown subcommand %q (see -h)", cmd.name)
		}
	}
	fs := flag.NewFlagSet("llm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&cmd.json, "json", false, "end with one JSON object on the last line (quota, stall)")
	fs.DurationVar(&cmd.duration, "duration", DefaultQuotaParams().Duration, "quota: how long calls keep arriving")
	fs.Usage = func() {
		var titles strings.Builder
		for _, s := range scenarios {
			titles.WriteString("  " + s.title + "\n")
		}
		fmt.Fprintf(stderr, usage, titles.String())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cmd, err
	}
	if fs.NArg() > 0 {
		return cmd, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	if cmd.duration <= 0 {
		return cmd, fmt.Errorf("-duration must be > 0, got %s", cmd.duration)
	}
	return cmd, nil
}

func main() {
	cmd, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(2)
	}
	if err := run(cmd, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(1)
	}
}

// run runs cmd, writing its report to w.
func run(cmd command, w io.Writer) error {
	var result any
	switch cmd.name {
	case "quota":
		p := DefaultQuotaParams()
		p.Duration = cmd.duration
		fmt.Fprintf(w, "quota: %.0f calls/s for %s, %d requests and %d tokens per %s (%d a call), %s per call\n",
			p.Rate, p.Duration, p.Quota.Requests, p.Quota.Tokens, p.Quota.Window, p.Quota.CallTokens, p.Deadline)
		r, err := RunQuota(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "   openai-go, its own retries:     %4d ok, %4d failed, %5d answered 429, p99 %d ms\n", r.SDKOK, r.SDKFailed, r.SDK429, r.SDKP99)
		fmt.Fprintf(w, "   openai-go behind watertight:    %4d ok, %4d failed, %5d answered 429, p99 %d ms\n", r.WTOK, r.WTFailed, r.WT429, r.WTP99)
		fmt.Fprintf(w, "   anthropic-sdk-go, its retries:  %4d ok, %4d failed, %5d answered 429, p99 %d ms\n", r.AnthropicSDKOK, r.AnthropicSDKFailed, r.AnthropicSDK429, r.AnthropicSDKP99)
		fmt.Fprintf(w, "   anthropic-sdk-go, watertight:   %4d ok, %4d failed, %5d answered 429, p99 %d ms\n", r.AnthropicWTOK, r.AnthropicWTFailed, r.AnthropicWT429, r.AnthropicWTP99)
		fmt.Fprintln(w, "   targets, each provider (wt_429 <= sdk_429/2, wt_ok >= sdk_ok - 2%):", verdict(r.Check()))
		result = r
	case "stall":
		p := DefaultStallParams()
		r, err := RunStall(p)
		fmt.Fprintf(w, "stall: idle timeout %d ms, first-byte timeout %d ms\n", r.IdleTimeoutMs, r.FirstByteTimeoutMs)
		fmt.Fprintf(w, "   %d stalled streams (keepalives flowing), %d cut by the idle timeout, median %d ms after the last token\n",
			r.Stalls, r.StallsCut, r.StallDetectMs)
		fmt.Fprintf(w, "   %d streams late to their first token, %d recovered by a retry; %d duplicated chunks\n",
			r.LateTotal, r.LateRecovered, r.DuplicatedChunks)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "   targets (stall_detect_ms <= idle_timeout_ms + 50, all late recovered, no duplicate):", verdict(r.Check()))
		result = r
	default:
		for _, s := range scenarios {
			fmt.Fprintln(w, s.title)
			if err := s.run(); err != nil {
				return err
			}
			fmt.Fprintln(w)
		}
		return nil
	}
	if cmd.json {
		b, err := json.Marshal(result)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, string(b))
	}
	return nil
}

// verdict says whether a Check passed.
func verdict(err error) string {
	if err == nil {
		return "met"
	}
	return "MISSED: " + strings.ReplaceAll(err.Error(), "\n", "; ")
}

// demoLimits are DefaultLimits scaled down so that the demo runs in a few
// seconds.
func demoLimits() Limits {
	l := DefaultLimits()
	l.Slots, l.Queue, l.QueueWait = 2, 0, 0
	l.CallTimeout, l.AttemptTimeout = 3*time.Second, 2*time.Second
	l.Backoff, l.MaxWait = 50*time.Millisecond, time.Second
	l.TripAfter, l.OpenFor = 3, 300*time.Millisecond
	return l
}

// pair is one fake provider and the guarded client that talks to it.
type pair struct {
	fake *Fake
	chat Chat
}

func (p pair) close() {
	p.chat.Guard().Close()
	p.fake.Close()
}

func newPair(api API, cfg FakeConfig, l Limits) (pair, error) {
	f := NewFake(api, cfg)
	c, err := newChat(api, f.BaseURL(), l)
	if err != nil {
		f.Close()
		return pair{}, err
	}
	return pair{fake: f, chat: c}, nil
}

func ms(d time.Duration) string {
	if d < time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// describe names an error briefly: which policy stopped the call, or what
// the provider answered.
func describe(err error) string {
	var oe *openai.Error
	var ae *anthropic.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, bulkhead.ErrFull):
		return "rejected: bulkhead full"
	case errors.Is(err, breaker.ErrOpen):
		return "rejected: breaker open"
	case errors.Is(err, httppolicy.ErrIdleTimeout):
		return "idle timeout"
	case errors.Is(err, httppolicy.ErrFirstByteTimeout):
		return "first-byte timeout"
	case errors.Is(err, deadline.ErrExceeded):
		return "deadline exceeded"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out (context.DeadlineExceeded)"
	case errors.As(err, &oe):
		return fmt.Sprintf("HTTP %d from the provider", oe.StatusCode)
	case errors.As(err, &ae):
		return fmt.Sprintf("HTTP %d from the provider", ae.StatusCode)
	}
	return err.Error()
}

func healthy() error {
	for _, api := range []API{OpenAIAPI, AnthropicAPI} {
		p, err := newPair(api, FakeConfig{}, demoLimits())
		if err != nil {
			return err
		}
		ctx := context.Background()
		start := time.Now()
		text, err := p.chat.Complete(ctx, "hi")
		if err != nil {
			p.close()
			return err
		}
		fmt.Printf("   %-9s complete: %q in %s\n", api, text, ms(time.Since(start)))
		start = time.Now()
		n := 0
		text, err = p.chat.Stream(ctx, "hi", func(string) { n++ })
		p.close()
		if err != nil {
			return err
		}
		fmt.Printf("   %-9s stream:   %q in %d deltas, %s\n", api, text, n, ms(time.Since(start)))
	}
	return nil
}

func slowProvider() error {
	oa, err := newPair(OpenAIAPI, FakeConfig{Delay: 300 * time.Millisecond}, demoLimits())
	if err != nil {
		return err
	}
	defer oa.close()
	an, err := newPair(AnthropicAPI, FakeConfig{}, demoLimits())
	if err != nil {
		return err
	}
	defer an.close()
	oa.fake.SetMode(Slow)
	ctx := context.Background()

	// 6 OpenAI calls at once against a 2-slot bulkhead with no queue.
	const calls = 6
	type outcome struct {
		err  error
		took time.Duration
	}
	results := make(chan outcome, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			start := time.Now()
			_, err := oa.chat.Complete(ctx, "hi")
			results <- outcome{err, time.Since(start)}
		})
	}
	bh := oa.chat.Guard().Pipeline.Bulkhead()
	for bh.Active() < bh.Limit() {
		time.Sleep(time.Millisecond)
	}
	// Meanwhile, Anthropic answers as fast as ever.
	var slowest time.Duration
	for range 3 {
		start := time.Now()
		if _, err := an.chat.Complete(ctx, "hi"); err != nil {
			return err
		}
		slowest = max(slowest, time.Since(start))
	}
	fmt.Printf("   anthropic: 3 calls answered, slowest %s, while openai's bulkhead held %d/%d slots\n",
		ms(slowest), bh.Active(), bh.Limit())
	wg.Wait()
	close(results)
	counts := map[string]int{}
	longest := map[string]time.Duration{}
	for r := range results {
		d := describe(r.err)
		counts[d]++
		longest[d] = max(longest[d], r.took)
	}
	for _, d := range []string{"ok", "rejected: bulkhead full"} {
		fmt.Printf("   openai:    %d x %s (slowest %s)\n", counts[d], d, ms(longest[d]))
	}
	fmt.Printf("   the slow fake saw %d requests: rejected calls never left the process\n", oa.fake.Requests())
	return nil
}

func retryAfter() error {
	for _, api := range []API{OpenAIAPI, AnthropicAPI} {
		l := demoLimits()
		var asked []time.Duration
		l.OnRetry = func(n int, err error, wait time.Duration) { asked = append(asked, wait) }
		p, err := newPair(api, FakeConfig{RetryAfter: 150 * time.Millisecond}, l)
		if err != nil {
			return err
		}
		p.fake.Script(TooMany, OK)
		text, err := p.chat.Complete(context.Background(), "hi")
		p.close()
		if err != nil {
			return err
		}
		at := p.fake.Arrivals()
		fmt.Printf("   %-9s 429 with Retry-After-Ms: 150: the retry waited its backoff %s, the rate-limit hold the rest; 2nd try came %s after the 1st: %q\n",
			api, ms(sum(asked)), ms(at[1].Sub(at[0])), text)
	}
	return nil
}

func breakerCycle() error {
	l := demoLimits()
	var changes []string
	var mu sync.Mutex
	l.OnState = func(from, to breaker.State) {
		mu.Lock()
		changes = append(changes, from.String()+" -> "+to.String())
		mu.Unlock()
	}
	an, err := newPair(AnthropicAPI, FakeConfig{}, l)
	if err != nil {
		return err
	}
	defer an.close()
	oa, err := newPair(OpenAIAPI, FakeConfig{}, demoLimits())
	if err != nil {
		return err
	}
	defer oa.close()
	an.fake.SetMode(Fail)
	ctx := context.Background()
	var got []string
	for range 5 {
		_, err := an.chat.Complete(ctx, "hi")
		got = append(got, describe(err))
	}
	fmt.Printf("   anthropic failing: %s\n", strings.Join(got, "; "))
	fmt.Printf("   the fake saw %d requests (the call's Idempotency-Key lets the 500 be retried: the breaker opened on the first call's 3rd attempt)\n",
		an.fake.Requests())
	_, err = oa.chat.Complete(ctx, "hi")
	fmt.Printf("   openai meanwhile: %s, its breaker %s\n", describe(err), oa.chat.Guard().Pipeline.Breaker().State())

	an.fake.SetMode(OK)
	br := an.chat.Guard().Pipeline.Breaker()
	start := time.Now()
	for br.State() == breaker.Open {
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("   anthropic recovered; breaker %s after %s\n", br.State(), ms(time.Since(start)))
	text, err := an.chat.Complete(ctx, "hi")
	fmt.Printf("   probe: %s %q; breaker %s\n", describe(err), text, br.State())
	mu.Lock()
	fmt.Printf("   transitions: %s\n", strings.Join(changes, ", "))
	mu.Unlock()
	return nil
}

func streamSlot() error {
	for _, api := range []API{OpenAIAPI, AnthropicAPI} {
		p, err := newPair(api, FakeConfig{ChunkGap: 40 * time.Millisecond}, demoLimits())
		if err != nil {
			return err
		}
		bh := p.chat.Guard().Pipeline.Bulkhead()
		var during []int
		start := time.Now()
		_, err = p.chat.Stream(context.Background(), "hi", func(string) { during = append(during, bh.Active()) })
		took := time.Since(start)
		after := bh.Active()
		p.close()
		if err != nil {
			return err
		}
		fmt.Printf("   %-9s slots held at each delta: %v; after the stream (%s): %d\n", api, during, ms(took), after)
	}
	return nil
}

func hung() error {
	l := demoLimits()
	l.AttemptTimeout, l.CallTimeout = 500*time.Millisecond, time.Second
	for _, api := range []API{OpenAIAPI, AnthropicAPI} {
		p, err := newPair(api, FakeConfig{}, l)
		if err != nil {
			return err
		}
		p.fake.SetMode(Hang)
		start := time.Now()
		_, err = p.chat.Complete(context.Background(), "hi")
		took := time.Since(start)
		active := p.chat.Guard().Pipeline.Bulkhead().Active()
		p.close()
		fmt.Printf("   %-9s %s after %s (attempt timeout 500ms, retried once within the 1s call deadline); slots held after: %d\n", api, describe(err), ms(took), active)
	}
	return nil
}

func fallbackDemo() error {
	l := demoLimits()
	l.Idle = 300 * time.Millisecond
	l.TripAfter = 10 // the 503s above must not open openai's breaker for the stall below
	oa, err := newPair(OpenAIAPI, FakeConfig{}, l)
	if err != nil {
		return err
	}
	defer oa.close()
	an, err := newPair(AnthropicAPI, FakeConfig{}, l)
	if err != nil {
		return err
	}
	defer an.close()
	var moves []string
	a := &Assistant{Primary: oa.chat, Secondary: an.chat, OnFallback: func(from, to string, err error) {
		moves = append(moves, fmt.Sprintf("%s -> %s after %s", from, to, describe(err)))
	}}
	ctx := context.Background()
	oa.fake.SetMode("503")
	text, err := a.Stream(ctx, "hi", nil)
	fmt.Printf("   openai answering 503: %s %q; moves: %s\n", describe(err), text, strings.Join(moves, "; "))
	moves = nil
	oa.fake.SetMode(Stall)
	before := an.fake.Requests()
	var got strings.Builder
	_, err = a.Stream(ctx, "hi", func(d string) { got.WriteString(d) })
	fmt.Printf("   openai stalling after %q (keepalives flowing): %s; moves: %d, anthropic asked %d times\n",
		got.String(), describe(err), len(moves), an.fake.Requests()-before)
	return nil
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
