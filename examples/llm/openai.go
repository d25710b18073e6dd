package main

import (
	"context"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/watertight/watertight"
	"github.com/watertight/watertight/fallback"
	"github.com/watertight/watertight/httppolicy"
)

// OpenAI is an openai-go v3 client whose every request runs through its own
// watertight pipeline. It is safe for concurrent use.
type OpenAI struct {
	client openai.Client
	guard  *watertight.Client
	model  string
	idle   time.Duration
}

var _ Chat = (*OpenAI)(nil)

// NewOpenAI returns a client for the OpenAI API at baseURL (for the real
// service, "https://api.openai.com/v1/"), guarded by a pipeline sized by l.
func NewOpenAI(baseURL, apiKey string, l Limits) (*OpenAI, error) {
	l.StreamEnd = &httppolicy.OpenAIStreamEnd
	g, err := NewGuard("openai", l)
	if err != nil {
		return nil, err
	}
	client := openai.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey(apiKey),
		// Every attempt goes through httppolicy.Transport: the bulkhead, the
		// deadline, the retry (which honours Retry-After-Ms and Retry-After)
		// and the breaker.
		option.WithHTTPClient(g.Client),
		// The SDK's own retries are off. Left on (2 by default), they run
		// around our transport: each SDK try is a whole Execute of the
		// pipeline, so our 3 attempts become up to 3 x 3 = 9 requests, and
		// the SDK's backoff sleeps between Executes, where our deadline does
		// not bound it (each try gets a fresh budget) and our bulkhead does
		// not count it. One retry loop, ours, decides.
		option.WithMaxRetries(0),
	)
	return &OpenAI{client: client, guard: g, model: "gpt-fake", idle: l.Idle}, nil
}

// Guard returns the client's pipeline.
func (c *OpenAI) Guard() *watertight.Client { return c.guard }

// Close closes the pipeline's idle connections and instruments.
func (c *OpenAI) Close() error { return c.guard.Close() }

func (c *OpenAI) params(prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    c.model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
}

// Complete asks POST /v1/chat/completions for a whole answer.
func (c *OpenAI) Complete(ctx context.Context, prompt string) (string, error) {
	// The headers of an answer that is not streamed come only once it is
	// whole: the first-byte timeout, sized for streams, is off; the
	// whole-call deadline bounds the wait.
	ctx = httppolicy.WithStreamTimeouts(ctx, 0, c.idle)
	resp, err := c.client.Chat.Completions.New(ctx, c.params(prompt), option.WithHeader("Idempotency-Key", newKey()))
	if err != nil {
		return "", err
	}
	if len(resp.Choices) == 0 {
		return "", nil
	}
	return resp.Choices[0].Message.Content, nil
}

// Stream asks for a streamed answer. The bulkhead slot is held from the
// request until the stream is closed: a long answer is load, and counted.
func (c *OpenAI) Stream(ctx context.Context, prompt string, onDelta func(string)) (string, error) {
	stream := c.client.Chat.Completions.NewStreaming(ctx, c.params(prompt), option.WithHeader("Idempotency-Key", newKey()))
	// Close frees the slot (and returns once it is free) even if we stop
	// reading early.
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		if len(chunk.Choices) == 0 || chunk.Choices[0].Delta.Content == "" {
			continue
		}
		d := chunk.Choices[0].Delta.Content
		text.WriteString(d)
		// Part of the answer is out: a failure from here on must not
		// move to another provider (duplicated text), nor be retried.
		fallback.MarkDelivered(ctx)
		if onDelta != nil {
			onDelta(d)
		}
	}
	if err := stream.Err(); err != nil {
		return text.String(), err
	}
	return text.String(), stream.Close()
}
