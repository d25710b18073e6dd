package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/httppolicy"
)

// TestQuotaSimulated runs the whole quota scenario, DefaultQuotaParams
// (15 calls/s for 60 s against 60 requests and 60 000 tokens per 6 s, 20 s
// per call), its four arms at once (openai-go and anthropic-sdk-go, each
// with its own retries and behind watertight), in a testing/synctest
// bubble: the fakes serve on an in-memory network, so the 80 s of the run
// pass in simulated time, in seconds. It guards the scenario's targets end
// to end, no more: QuotaResult.Check for each provider (the watertight
// arm's 429s at most half the SDK's, its successes no fewer than the
// SDK's less 2% of the calls), that every call was counted, and that the
// control, the same run without the RateLimit section, misses them (the
// watertight arms then retry into the quota as the SDKs do). The targets
// are loose: a Limiter that holds but lets everything after a hold go at
// once misses them, but the gate's finer rules (the hold's length, the
// order of answers, the uncounted attempts, the timed release) can be
// broken and still meet them; ratelimit's own
// tests guard those.
func TestQuotaSimulated(t *testing.T) {
	for _, noThrottle := range []bool{false, true} {
		name := "with RateLimit"
		if noThrottle {
			name = "without RateLimit"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := DefaultQuotaParams()
				p.InMemory, p.NoThrottle = true, noThrottle
				r, err := RunQuota(p)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%+v", r)
				if r.SDK429 == 0 || r.AnthropicSDK429 == 0 {
					t.Fatalf("an SDK's arm drew no 429: the scenario does not throttle")
				}
				n := int(p.Duration.Seconds() * p.Rate)
				for _, arm := range [][2]int{{r.SDKOK, r.SDKFailed}, {r.WTOK, r.WTFailed},
					{r.AnthropicSDKOK, r.AnthropicSDKFailed}, {r.AnthropicWTOK, r.AnthropicWTFailed}} {
					if arm[0]+arm[1] != n {
						t.Errorf("an arm counted %d ok + %d failed calls, want %d in all", arm[0], arm[1], n)
					}
				}
				err = r.Check()
				if !noThrottle && err != nil {
					t.Errorf("targets missed: %v", err)
				}
				if noThrottle && err == nil {
					t.Errorf("without the RateLimit section the targets were met: the test does not measure it")
				}
			})
		})
	}
}

// TestQuotaCheck checks the targets' arithmetic on made-up results.
func TestQuotaCheck(t *testing.T) {
	for _, tc := range []struct {
		r  QuotaResult
		ok bool
	}{
		{QuotaResult{SDK429: 100, SDKOK: 90, SDKFailed: 10, WT429: 50, WTOK: 88, WTFailed: 12}, true},
		{QuotaResult{SDK429: 100, SDKOK: 90, SDKFailed: 10, WT429: 51, WTOK: 95}, false},
		{QuotaResult{SDK429: 100, SDKOK: 90, SDKFailed: 10, WT429: 0, WTOK: 87, WTFailed: 13}, false},
		{QuotaResult{}, true},
	} {
		if err := tc.r.Check(); (err == nil) != tc.ok {
			t.Errorf("%+v: Check() = %v, want ok = %v", tc.r, err, tc.ok)
		}
	}
}

// TestStallShort runs the stall scenario with short timeouts and checks
// what holds however loaded the machine is: every stalled stream, its
// keepalives flowing, is cut by the idle timeout (keepalives do not reset
// it), not sooner than the timeout after its last token; every late first
// byte is retried and recovered; no chunk reaches a caller twice, and the
// Assistant did not fall back after part of the answer was delivered.
func TestStallShort(t *testing.T) {
	p := StallParams{Idle: 200 * time.Millisecond, FirstByte: 150 * time.Millisecond, Keepalive: 30 * time.Millisecond, Stalls: 3, Late: 2}
	r, err := RunStall(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Stalls != 6 || r.StallsCut != 6 {
		t.Errorf("stalls %d, cut by the idle timeout %d; want 6 and 6", r.Stalls, r.StallsCut)
	}
	if r.StallDetectMs < r.IdleTimeoutMs {
		t.Errorf("stall_detect_ms = %d, before the %d ms idle timeout", r.StallDetectMs, r.IdleTimeoutMs)
	}
	if r.LateTotal != 4 || r.LateRecovered != 4 {
		t.Errorf("late first bytes %d, recovered %d; want 4 and 4", r.LateTotal, r.LateRecovered)
	}
	if r.DuplicatedChunks != 0 {
		t.Errorf("duplicated_chunks = %d", r.DuplicatedChunks)
	}
}

// TestStallCheck checks the targets' arithmetic on made-up results.
func TestStallCheck(t *testing.T) {
	good := StallResult{IdleTimeoutMs: 500, StallDetectMs: 550, LateTotal: 4, LateRecovered: 4, Stalls: 3, StallsCut: 3}
	if err := good.Check(); err != nil {
		t.Errorf("Check() = %v", err)
	}
	for _, bad := range []func(*StallResult){
		func(r *StallResult) { r.StallDetectMs = 551 },
		func(r *StallResult) { r.LateRecovered = 3 },
		func(r *StallResult) { r.DuplicatedChunks = 1 },
		func(r *StallResult) { r.StallsCut = 2 },
	} {
		r := good
		bad(&r)
		if r.Check() == nil {
			t.Errorf("%+v: Check() = nil", r)
		}
	}
}

// TestFakeSpeaksTheProviders reads the fake's raw answers: the rate-limit
// headers of each API on a 200 and on a 429 over quota (with Retry-After),
// and each API's keepalive in a stream, with the answer's events after it.
func TestFakeSpeaksTheProviders(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			f := NewFake(api, FakeConfig{Quota: &Quota{Requests: 1, Tokens: 1000, Window: time.Minute, CallTokens: 1000}, Delay: 60 * time.Millisecond, Keepalive: 20 * time.Millisecond})
			defer f.Close()
			path := "/v1/chat/completions"
			remaining := "X-Ratelimit-Remaining-Requests"
			if api == AnthropicAPI {
				path, remaining = "/v1/messages", "Anthropic-Ratelimit-Requests-Remaining"
			}
			post := func(stream bool) *http.Response {
				body := `{"model":"m","stream":false}`
				if stream {
					body = `{"model":"m","stream":true}`
				}
				res, err := http.Post(f.URL+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { res.Body.Close() })
				return res
			}
			f.Script(Late)
			res := post(true)
			if res.StatusCode != 200 || res.Header.Get(remaining) != "0" {
				t.Fatalf("first: %d, %s = %q; want 200 and 0", res.StatusCode, remaining, res.Header.Get(remaining))
			}
			first, _ := bufio.NewReader(res.Body).ReadString('\n')
			wantKeepalive := ": ping\n"
			if api == AnthropicAPI {
				wantKeepalive = "event: ping\n"
			}
			if first != wantKeepalive {
				t.Errorf("a late stream starts with %q, want the keepalive %q", first, wantKeepalive)
			}
			rest, _ := io.ReadAll(res.Body)
			if api == AnthropicAPI && !strings.Contains(string(rest), `data: {"type": "ping"}`) {
				t.Errorf("no ping data line in %q", rest)
			}
			if !strings.Contains(string(rest), "Hello") {
				t.Errorf("the answer did not follow the keepalives: %q", rest)
			}
			res = post(false)
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || res.Header.Get(remaining) != "0" {
				t.Errorf("over quota: %d, Retry-After %q, %s %q; want 429, a Retry-After and 0",
					res.StatusCode, res.Header.Get("Retry-After"), remaining, res.Header.Get(remaining))
			}
			for k := range res.Header {
				if strings.HasPrefix(k, "X-Ratelimit-Reset") {
					if _, err := time.ParseDuration(res.Header.Get(k)); err != nil {
						t.Errorf("%s: %v", k, err)
					}
				}
				if strings.HasPrefix(k, "Anthropic-Ratelimit-") && strings.HasSuffix(k, "-Reset") {
					if _, err := time.Parse(time.RFC3339, res.Header.Get(k)); err != nil {
						t.Errorf("%s: %v", k, err)
					}
				}
			}
			if n429, nOK := f.Counts(); n429 != 1 || nOK != 1 {
				t.Errorf("Counts() = %d, %d; want 1, 1", n429, nOK)
			}
		})
	}
}

// newAssistant returns an Assistant over two fakes, OpenAI then Anthropic,
// with the moves it made.
func newAssistant(t *testing.T, l Limits) (a *Assistant, oa, an pair, moves *[]string) {
	oa = newTestPair(t, OpenAIAPI, FakeConfig{}, l)
	an = newTestPair(t, AnthropicAPI, FakeConfig{}, l)
	moves = new([]string)
	a = &Assistant{Primary: oa.chat, Secondary: an.chat, OnFallback: func(from, to string, err error) {
		*moves = append(*moves, from+">"+to)
	}}
	return a, oa, an, moves
}

// TestAssistantFallsBack: a 5xx, a 429 whose retries ran out, and a late
// first byte on every attempt move on to Anthropic; a 400 does not (the
// request is wrong everywhere), nor does the caller's own cancellation.
func TestAssistantFallsBack(t *testing.T) {
	l := testLimits()
	l.Attempts, l.Backoff, l.FirstByte = 2, time.Millisecond, 100*time.Millisecond
	for _, tc := range []struct {
		mode Mode
		move bool
	}{{Fail, true}, {TooMany, true}, {Late, true}, {"400", false}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			a, oa, an, moves := newAssistant(t, l)
			oa.fake.SetMode(tc.mode)
			got, err := a.Stream(context.Background(), "hi", nil)
			if !tc.move {
				if err == nil || statusCode(err) != 400 || len(*moves) != 0 || an.fake.Requests() != 0 {
					t.Fatalf("got %q, %v, moves %v, anthropic saw %d; want the 400 and no move", got, err, *moves, an.fake.Requests())
				}
				return
			}
			if err != nil || got != wantText(AnthropicAPI) || len(*moves) != 1 {
				t.Fatalf("got %q, %v, moves %v; want Anthropic's answer after one move", got, err, *moves)
			}
		})
	}
	t.Run("canceled", func(t *testing.T) {
		a, oa, an, moves := newAssistant(t, l)
		oa.fake.SetMode(Hang)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := a.Complete(ctx, "hi")
		if !errors.Is(err, context.Canceled) || len(*moves) != 0 || an.fake.Requests() != 0 {
			t.Fatalf("err %v, moves %v, anthropic saw %d; want context.Canceled and no move", err, *moves, an.fake.Requests())
		}
	})
}

// TestShouldFallback: 408, 429 and 5xx move on, other 4xx do not, with
// each SDK's error type.
func TestShouldFallback(t *testing.T) {
	l := testLimits()
	l.Attempts = 1
	for _, api := range apis {
		for code, want := range map[int]bool{400: false, 401: false, 404: false, 408: true, 429: true, 500: true, 503: true} {
			p := newTestPair(t, api, FakeConfig{}, l)
			p.fake.SetMode(Mode(strconv.Itoa(code)))
			_, err := p.chat.Complete(context.Background(), "hi")
			if statusCode(err) != code || ShouldFallback(err) != want {
				t.Errorf("%s %d: err %v, ShouldFallback = %v, want %v", api, code, err, ShouldFallback(err), want)
			}
		}
	}
	if ShouldFallback(context.Canceled) || ShouldFallback(errors.New("other")) {
		t.Error("ShouldFallback moves on for a cancellation or an unknown error")
	}
}

// Test429IsNotABreakerFailure: a burst of 429s, each retried, leaves the
// breaker closed (it opens after 3 failures); three 500s open it.
func Test429IsNotABreakerFailure(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			p := newTestPair(t, api, FakeConfig{RetryAfter: time.Millisecond}, l)
			p.fake.SetMode(TooMany)
			for range 3 {
				if _, err := p.chat.Complete(context.Background(), "hi"); statusCode(err) != 429 {
					t.Fatalf("err = %v, want the 429", err)
				}
			}
			if n := p.fake.Requests(); n != 9 {
				t.Errorf("fake saw %d requests, want 9 (3 calls x 3 attempts)", n)
			}
			if s := p.chat.Guard().Pipeline.Breaker().State(); s != breaker.Closed {
				t.Errorf("breaker %v after 9 answers 429, want closed", s)
			}
		})
	}
}

// TestStreamTimeoutsWired: the Limits' FirstByte and Idle reach the
// Transport: a stall surfaces through each SDK as httppolicy.ErrIdleTimeout.
func TestStreamTimeoutsWired(t *testing.T) {
	l := testLimits()
	l.Idle = 100 * time.Millisecond
	for _, api := range apis {
		p := newTestPair(t, api, FakeConfig{Keepalive: 20 * time.Millisecond}, l)
		p.fake.SetMode(Stall)
		_, err := p.chat.Stream(context.Background(), "hi", nil)
		if !errors.Is(err, httppolicy.ErrIdleTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: err = %v, want httppolicy.ErrIdleTimeout", api, err)
		}
	}
}

// TestCompleteIsNotCutByFirstByte: an answer that is not streamed comes
// whole after the generation, so Complete turns the first-byte timeout off
// for its request: a 300 ms generation passes a 100 ms FirstByte, which a
// stream as late fails on (and retries) every attempt.
func TestCompleteIsNotCutByFirstByte(t *testing.T) {
	l := testLimits()
	l.FirstByte, l.Attempts, l.Backoff = 100*time.Millisecond, 2, time.Millisecond
	for _, api := range apis {
		p := newTestPair(t, api, FakeConfig{Delay: 300 * time.Millisecond}, l)
		p.fake.SetMode(Slow)
		if got, err := p.chat.Complete(context.Background(), "hi"); err != nil || got != wantText(api) {
			t.Errorf("%s: Complete = %q, %v", api, got, err)
		}
		p.fake.SetMode(Late)
		before := p.fake.Requests()
		_, err := p.chat.Stream(context.Background(), "hi", nil)
		if !errors.Is(err, httppolicy.ErrFirstByteTimeout) || p.fake.Requests()-before != 2 {
			t.Errorf("%s: late Stream: err %v after %d requests, want ErrFirstByteTimeout after 2", api, err, p.fake.Requests()-before)
		}
	}
}

// TestAssistantStorm: 60 streams at once through the Assistant while
// OpenAI's answers cycle through OK, 503, a stall and a late first token,
// a third of the callers canceling at a random moment. Every caller gets
// a prefix of one provider's answer, never pieces of both (no fallback
// after delivery); every slot of both bulkheads is free at the end, and
// goleak (TestMain) finds no goroutine left.
func TestAssistantStorm(t *testing.T) {
	l := testLimits()
	l.Slots, l.Queue, l.QueueWait = 16, 64, 5*time.Second
	l.FirstByte, l.Idle, l.Backoff, l.TripAfter = 100*time.Millisecond, 150*time.Millisecond, time.Millisecond, 1000
	oa := newTestPair(t, OpenAIAPI, FakeConfig{Keepalive: 20 * time.Millisecond, Delay: 200 * time.Millisecond, ChunkGap: 5 * time.Millisecond}, l)
	an := newTestPair(t, AnthropicAPI, FakeConfig{ChunkGap: 5 * time.Millisecond}, l)
	modes := []Mode{OK, "503", Stall, Late}
	script := make([]Mode, 200)
	for i := range script {
		script[i] = modes[i%len(modes)]
	}
	oa.fake.Script(script...)
	a := &Assistant{Primary: oa.chat, Secondary: an.chat}
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	for i := range 60 {
		cancelAfter := time.Duration(-1)
		if i%3 == 0 {
			cancelAfter = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if cancelAfter >= 0 {
				time.AfterFunc(cancelAfter, cancel)
			}
			var got strings.Builder
			text, err := a.Stream(ctx, "hi", func(d string) { got.WriteString(d) })
			g := got.String()
			if !strings.HasPrefix(wantText(OpenAIAPI), g) && !strings.HasPrefix(wantText(AnthropicAPI), g) {
				t.Errorf("call %d got %q: pieces of both answers", i, g)
			}
			if err == nil && text != g {
				t.Errorf("call %d: returned %q, delivered %q", i, text, g)
			}
		})
	}
	wg.Wait()
	for _, p := range []pair{oa, an} {
		if n := p.chat.Guard().Pipeline.Bulkhead().Active(); n != 0 {
			t.Errorf("%s: %d slots still held", p.fake.API, n)
		}
	}
}
