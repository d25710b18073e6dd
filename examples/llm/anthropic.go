package main

import (
	"context"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/watertight/watertight"
	"github.com/watertight/watertight/fallback"
	"github.com/watertight/watertight/httppolicy"
)

// Anthropic is an anthropic-sdk-go v2 client whose every request runs
// through its own watertight pipeline. It is safe for concurrent use.
type Anthropic struct {
	client anthropic.Client
	guard  *watertight.Client
	model  anthropic.Model
	idle   time.Duration
}

var _ Chat = (*Anthropic)(nil)

// NewAnthropic returns a client for the Anthropic API at baseURL (for the
// real service, "https://api.anthropic.com/"), guarded by a pipeline sized
// by l.
func NewAnthropic(baseURL, apiKey string, l Limits) (*Anthropic, error) {
	l.StreamEnd = &httppolicy.AnthropicStreamEnd
	g, err := NewGuard("anthropic", l)
	if err != nil {
		return nil, err
	}
	client := anthropic.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey(apiKey),
		option.WithHTTPClient(g.Client),
		// Off, as for OpenAI: otherwise attempts multiply (3 of ours x 3 of
		// the SDK's = 9 requests), and the SDK's backoff waits between our
		// Executes, bounded by no deadline of ours and counted by no
		// bulkhead.
		option.WithMaxRetries(0),
		// The SDK would otherwise start its own span for every call through
		// the global TracerProvider. The pipeline already starts one per
		// call (and one per retry attempt): keep one set of spans.
		option.WithoutOpenTelemetry(),
	)
	return &Anthropic{client: client, guard: g, model: "claude-fake", idle: l.Idle}, nil
}

// Guard returns the client's pipeline.
func (c *Anthropic) Guard() *watertight.Client { return c.guard }

// Close closes the pipeline's idle connections and instruments.
func (c *Anthropic) Close() error { return c.guard.Close() }

func (c *Anthropic) params(prompt string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model:     c.model,
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
}

// Complete asks POST /v1/messages for a whole answer.
func (c *Anthropic) Complete(ctx context.Context, prompt string) (string, error) {
	// Not streamed: no first-byte timeout (see OpenAI.Complete).
	ctx = httppolicy.WithStreamTimeouts(ctx, 0, c.idle)
	msg, err := c.client.Messages.New(ctx, c.params(prompt), option.WithHeader("Idempotency-Key", newKey()))
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, block := range msg.Content {
		text.WriteString(block.Text)
	}
	return text.String(), nil
}

// Stream asks for a streamed answer. The bulkhead slot is held from the
// request until the stream is closed.
func (c *Anthropic) Stream(ctx context.Context, prompt string, onDelta func(string)) (string, error) {
	stream := c.client.Messages.NewStreaming(ctx, c.params(prompt), option.WithHeader("Idempotency-Key", newKey()))
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		ev, ok := stream.Current().AsAny().(anthropic.ContentBlockDeltaEvent)
		if !ok {
			continue
		}
		delta, ok := ev.Delta.AsAny().(anthropic.TextDelta)
		if !ok {
			continue
		}
		text.WriteString(delta.Text)
		fallback.MarkDelivered(ctx)
		if onDelta != nil {
			onDelta(delta.Text)
		}
	}
	if err := stream.Err(); err != nil {
		return text.String(), err
	}
	return text.String(), stream.Close()
}
