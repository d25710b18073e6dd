package main

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/watertight/watertight/breaker"
)

// A spent quota comes back at once through the real SDKs: one request, an
// SDK error that says so (OpenAI's 429 insufficient_quota, Anthropic's 402
// billing_error), no breaker failure, and a move to the other provider.
func TestSpentQuotaThroughTheSDKs(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			p := newTestPair(t, api, FakeConfig{}, testLimits())
			p.fake.SetMode(Spent)
			_, err := p.chat.Complete(t.Context(), "hi")
			switch api {
			case OpenAIAPI:
				var oe *openai.Error
				if !errors.As(err, &oe) || oe.StatusCode != 429 || oe.Code != "insufficient_quota" {
					t.Fatalf("err = %v; want openai's 429 insufficient_quota", err)
				}
			case AnthropicAPI:
				var ae *anthropic.Error
				if !errors.As(err, &ae) || ae.StatusCode != 402 {
					t.Fatalf("err = %v; want anthropic's 402", err)
				}
			}
			if n := p.fake.Requests(); n != 1 {
				t.Fatalf("%d requests; want 1", n)
			}
			if c := p.chat.Guard().Pipeline.Breaker().Counts(); c.TotalFailures != 0 {
				t.Fatalf("breaker counts %+v; want no failure", c)
			}
			if !ShouldFallback(err) {
				t.Fatalf("ShouldFallback(%v) = false; want a move to the other provider", err)
			}
		})
	}
}

// The SDKs' own retries, left on, do not send a spent quota again either:
// the response says X-Should-Retry: false.
func TestSpentQuotaStopsTheSDKsRetries(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			p := newTestPair(t, api, FakeConfig{}, testLimits())
			p.fake.SetMode(Spent)
			hc := p.chat.Guard().Client
			var err error
			switch api {
			case OpenAIAPI:
				c := openai.NewClient(option.WithBaseURL(p.fake.BaseURL()), option.WithAPIKey("k"), option.WithHTTPClient(hc), option.WithMaxRetries(2))
				_, err = c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "m",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			case AnthropicAPI:
				c := anthropic.NewClient(aoption.WithBaseURL(p.fake.BaseURL()), aoption.WithAPIKey("k"), aoption.WithHTTPClient(hc), aoption.WithMaxRetries(2))
				_, err = c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 8,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
			}
			if err == nil {
				t.Fatal("a spent quota succeeded")
			}
			if n := p.fake.Requests(); n != 1 {
				t.Fatalf("%d requests with the SDK's retries on; want 1", n)
			}
		})
	}
}

// Anthropic's 529 (overloaded) is retried, even for a POST.
func TestOverloadedThroughTheSDKs(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			p := newTestPair(t, api, FakeConfig{}, testLimits())
			p.fake.Script("529", OK)
			got, err := p.chat.Complete(t.Context(), "hi")
			if err != nil || got != wantText(api) {
				t.Fatalf("Complete = %q, %v; want the answer after a retry", got, err)
			}
			if n := p.fake.Requests(); n != 2 {
				t.Fatalf("%d requests; want 2", n)
			}
		})
	}
}

// A stream cut before its terminal event ("data: [DONE]", message_stop)
// surfaces an error to the SDK's stream reader, after the text that came,
// and counts as a breaker failure.
func TestCutStreamThroughTheSDKs(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			l.TripAfter = 1
			p := newTestPair(t, api, FakeConfig{}, l)
			p.fake.SetMode(Cut)
			text, err := p.chat.Stream(t.Context(), "hi", nil)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Stream = %q, %v; want an error matching io.ErrUnexpectedEOF", text, err)
			}
			if text != wantText(api) {
				t.Fatalf("text %q before the cut; want %q", text, wantText(api))
			}
			if s := p.chat.Guard().Pipeline.Breaker().State(); s != breaker.Open {
				t.Fatalf("breaker %v after a cut stream; want open (one failure trips it)", s)
			}
			// A whole stream is no error.
			p.chat.Guard().Pipeline.Breaker().Reset()
			p.fake.SetMode(OK)
			if got, err := p.chat.Stream(context.Background(), "hi", nil); err != nil || got != wantText(api) {
				t.Fatalf("a whole stream: %q, %v", got, err)
			}
		})
	}
}
