package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/httppolicy"
)

// StallParams sets up the stall scenario.
type StallParams struct {
	Idle      time.Duration // the Transport's IdleTimeout (500ms)
	FirstByte time.Duration // the Transport's FirstByteTimeout (300ms)
	Keepalive time.Duration // the fake's pause between keepalives (50ms)
	Stalls    int           // stalled streams per keepalive style, run at once (10)
	Late      int           // streams per API whose first attempt is late, one after another (5)
}

// DefaultStallParams are the scenario's defaults: short timeouts, so that
// it runs in a few seconds; a real provider wants 15s / 30s (DefaultLimits).
func DefaultStallParams() StallParams {
	return StallParams{Idle: 500 * time.Millisecond, FirstByte: 300 * time.Millisecond, Keepalive: 50 * time.Millisecond, Stalls: 10, Late: 5}
}

// StallResult prints as the scenario's JSON line. StallDetectMs is the
// median time from a stalled stream's last token to the caller's error;
// LateRecovered counts the late streams that succeeded after a retry;
// DuplicatedChunks counts the pieces of text a caller got more than once
// (or out of order). Stalls and StallsCut (cut by the idle timeout, not by
// something else) are extra.
type StallResult struct {
	IdleTimeoutMs      int64 `json:"idle_timeout_ms"`
	StallDetectMs      int64 `json:"stall_detect_ms"`
	FirstByteTimeoutMs int64 `json:"first_byte_timeout_ms"`
	LateTotal          int   `json:"late_first_byte_total"`
	LateRecovered      int   `json:"late_first_byte_recovered"`
	DuplicatedChunks   int   `json:"duplicated_chunks"`
	Stalls             int   `json:"stalls"`
	StallsCut          int   `json:"stalls_cut_by_idle_timeout"`
}

// stallLimits: the stream timeouts of p, 3 tries 20ms apart, a 10s call.
func stallLimits(p StallParams) Limits {
	return Limits{
		Slots: 64, CallTimeout: 10 * time.Second,
		FirstByte: p.FirstByte, Idle: p.Idle,
		Attempts: 3, Backoff: 20 * time.Millisecond, MaxWait: time.Second,
		TripAfter: 1000, OpenFor: time.Second,
	}
}

// tally checks the pieces one caller got against the fake's answer: it
// returns how many were duplicated or out of place.
func tally(api API, got []string) int {
	want := (&Fake{API: api}).chunks()
	dup := 0
	for i, g := range got {
		if i >= len(want) || g != want[i] {
			dup++
		}
	}
	return dup
}

// RunStall runs, for each API (and so each keepalive style: OpenAI's
// ": ping" comments, Anthropic's ping events), p.Stalls streams at once
// whose provider stops sending tokens but keeps sending keepalives, behind
// the Assistant (OpenAI, else Anthropic) for OpenAI and a lone client for
// Anthropic; then p.Late streams one after another whose first attempt
// lands on a replica that sends only keepalives for 3 x FirstByte before
// its first token, and whose retry lands on a healthy one.
func RunStall(p StallParams) (StallResult, error) {
	r := StallResult{IdleTimeoutMs: p.Idle.Milliseconds(), FirstByteTimeoutMs: p.FirstByte.Milliseconds()}
	var detect []time.Duration
	var mu sync.Mutex
	for _, api := range []API{OpenAIAPI, AnthropicAPI} {
		f := NewFake(api, FakeConfig{Keepalive: p.Keepalive, Delay: 3 * p.FirstByte})
		f.SetMode(Stall)
		healthy := NewFake(other(api), FakeConfig{})
		c, err := newChat(api, f.BaseURL(), stallLimits(p))
		if err != nil {
			return r, err
		}
		h, err := newChat(other(api), healthy.BaseURL(), stallLimits(p))
		if err != nil {
			return r, err
		}
		var ask Chat = c
		if api == OpenAIAPI {
			ask = &assistantChat{&Assistant{Primary: c, Secondary: h}, c}
		}
		var wg sync.WaitGroup
		for range p.Stalls {
			wg.Go(func() {
				var got []string
				var last time.Time
				_, err := ask.Stream(context.Background(), "hi", func(d string) {
					got = append(got, d)
					last = time.Now()
				})
				end := time.Now()
				mu.Lock()
				defer mu.Unlock()
				r.Stalls++
				r.DuplicatedChunks += tally(api, got)
				if errors.Is(err, httppolicy.ErrIdleTimeout) && !last.IsZero() {
					r.StallsCut++
					detect = append(detect, end.Sub(last))
				}
			})
		}
		wg.Wait()
		if n := healthy.Requests(); n != 0 {
			// A stream that delivered text must not start again elsewhere.
			r.DuplicatedChunks += n * len(healthy.chunks())
		}

		f.SetMode(OK)
		for range p.Late {
			before := f.Requests()
			f.Script(Late) // the late replica first; the retry goes to a healthy one
			var got []string
			text, err := c.Stream(context.Background(), "hi", func(d string) { got = append(got, d) })
			r.LateTotal++
			r.DuplicatedChunks += tally(api, got)
			if err == nil && text == strings.Join(f.chunks(), "") && f.Requests()-before == 2 {
				r.LateRecovered++
			}
		}
		c.Guard().Close()
		h.Guard().Close()
		f.Close()
		healthy.Close()
	}
	if len(detect) > 0 {
		slices.Sort(detect)
		r.StallDetectMs = detect[len(detect)/2].Milliseconds()
	}
	return r, nil
}

// assistantChat is an Assistant as a Chat whose Guard is its primary's.
type assistantChat struct {
	*Assistant
	primary Chat
}

func (a *assistantChat) Guard() *watertight.Client { return a.primary.Guard() }

func other(api API) API {
	if api == OpenAIAPI {
		return AnthropicAPI
	}
	return OpenAIAPI
}

// newChat returns the guarded client for api at baseURL.
func newChat(api API, baseURL string, l Limits) (Chat, error) {
	if api == OpenAIAPI {
		return NewOpenAI(baseURL, "sk-fake", l)
	}
	return NewAnthropic(baseURL, "sk-ant-fake", l)
}

// Check returns nil if r meets the scenario's targets: every stalled
// stream cut by the idle timeout within 50 ms of it (median), every late
// first byte recovered, no chunk duplicated; otherwise an error saying
// which target was missed.
func (r StallResult) Check() error {
	var errs []error
	if r.StallsCut != r.Stalls {
		errs = append(errs, fmt.Errorf("%d of %d stalled streams not cut by the idle timeout", r.Stalls-r.StallsCut, r.Stalls))
	}
	if r.StallDetectMs > r.IdleTimeoutMs+50 {
		errs = append(errs, fmt.Errorf("stall_detect_ms = %d, above idle_timeout_ms + 50 = %d", r.StallDetectMs, r.IdleTimeoutMs+50))
	}
	if r.LateRecovered != r.LateTotal {
		errs = append(errs, fmt.Errorf("%d of %d late first bytes not recovered", r.LateTotal-r.LateRecovered, r.LateTotal))
	}
	if r.DuplicatedChunks != 0 {
		errs = append(errs, fmt.Errorf("duplicated_chunks = %d, want 0", r.DuplicatedChunks))
	}
	return errors.Join(errs...)
}
