// Command llm wraps the openai-go v3 and anthropic-sdk-go v2 clients in
// watertight pipelines, one per provider, and runs them against local fake
// providers that can be made slow, rate-limited, failing or hung:
//
//	cd examples/llm && go run .
//
// Each provider's SDK gets option.WithHTTPClient with an
// httppolicy.Transport, so every HTTP exchange (a streamed body included)
// is one Execute of that provider's pipeline: bulkhead, deadline, retry,
// breaker, attempt deadline. The SDKs' own retries are off
// (option.WithMaxRetries(0)) so that ours alone decide.
package main

import (
	"context"
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
}

// parseArgs parses the command line: the command takes no flag and no
// subcommand, only -h, which prints the usage to stderr and returns
// flag.ErrHelp.
func parseArgs(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("llm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: go run .   (from examples/llm)

Runs the openai-go and anthropic-sdk-go clients, each through a watertight
pipeline, against local fake providers, in these scenarios:
`)
		for _, s := range scenarios {
			fmt.Fprintln(stderr, "  "+s.title)
		}
		fmt.Fprintln(stderr, "\nIt takes no flags and has no subcommands; it needs no API key or network.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	return nil
}

func main() {
	if err := parseArgs(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(2)
	}
	for _, s := range scenarios {
		fmt.Println(s.title)
		if err := s.run(); err != nil {
			fmt.Fprintln(os.Stderr, "   error:", err)
			os.Exit(1)
		}
		fmt.Println()
	}
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
	var (
		c   Chat
		err error
	)
	if api == OpenAIAPI {
		c, err = NewOpenAI(f.BaseURL(), "sk-fake", l)
	} else {
		c, err = NewAnthropic(f.BaseURL(), "sk-ant-fake", l)
	}
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
		fmt.Printf("   %-9s 429 with Retry-After-Ms: 150, retry waited %v; 2nd try came %s after the 1st: %q\n",
			api, asked, ms(at[1].Sub(at[0])), text)
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
	fmt.Printf("   the fake saw %d requests (a POST answered 500 is not retried: it may have been processed)\n",
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
		fmt.Printf("   %-9s %s after %s (attempt timeout 500ms); slots held after: %d\n", api, describe(err), ms(took), active)
	}
	return nil
}
