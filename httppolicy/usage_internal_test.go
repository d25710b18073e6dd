package httppolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Payloads as the providers send them.
const (
	openAIChatBody = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Hello! How can I assist you today?",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19,
    "completion_tokens": 10,
    "total_tokens": 29,
    "prompt_tokens_details": {
      "cached_tokens": 0,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_44709d6fcb"
}
`
	openAIChatStream = `data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

`
	openAIResponsesBody = `{
  "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41",
  "object": "response",
  "created_at": 1741476777,
  "status": "completed",
  "error": null,
  "incomplete_details": null,
  "instructions": null,
  "max_output_tokens": null,
  "model": "gpt-4o-2024-08-06",
  "output": [
    {
      "type": "message",
      "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c45c1d41",
      "status": "completed",
      "role": "assistant",
      "content": [
        {
          "type": "output_text",
          "text": "The image depicts a scenic landscape with a wooden boardwalk.",
          "annotations": []
        }
      ]
    }
  ],
  "parallel_tool_calls": true,
  "previous_response_id": null,
  "reasoning": {"effort": null, "summary": null},
  "store": true,
  "temperature": 1.0,
  "text": {"format": {"type": "text"}},
  "tool_choice": "auto",
  "tools": [],
  "top_p": 1.0,
  "truncation": "disabled",
  "usage": {
    "input_tokens": 328,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 52,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 380
  },
  "user": null,
  "metadata": {}
}`
	openAIResponsesStream = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"in_progress","error":null,"model":"gpt-4.1-2025-04-14","output":[],"usage":null,"user":null,"metadata":{}}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","output_index":0,"content_index":0,"delta":"Hi"}

event: response.completed
data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654","object":"response","created_at":1741290958,"status":"completed","error":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi there! How can I assist you today?","annotations":[]}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":0},"output_tokens":11,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":48},"user":null,"metadata":{}}}

`
	anthropicBody = `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":6,"service_tier":"standard"}}`
	anthropicHead = `event: message_start
data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-20250514","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

`
	anthropicDelta = `event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}

`
	anthropicStop   = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	anthropicStream = anthropicHead + anthropicDelta + anthropicStop
)

// usageReports feeds body to a reader of kind ("json" or "sse") in chunks
// of size n (0: whole) and returns what it reported.
func usageReports(kind, body string, n int) []int {
	var got []int
	r := testUsageReader(kind, &got)
	b := []byte(body)
	for n > 0 && len(b) > n {
		r.feed(b[:n])
		b = b[n:]
	}
	r.feed(b)
	return got
}

// testUsageReader returns a reader of kind ("json" or "sse") that
// appends its reports to got.
func testUsageReader(kind string, got *[]int) usageReader {
	report := func(t int) { *got = append(*got, t) }
	if kind == "json" {
		return &jsonUsage{found: func(raw []byte) {
			if t, ok := usageTokens(raw); ok {
				report(t)
			}
		}}
	}
	return newSSEUsage(report)
}

// usageBody returns an OpenAI chat body with usage as its usage.
func usageBody(usage string) string {
	return `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}],"usage":` + usage + `}`
}

func TestUsageReports(t *testing.T) {
	big := strings.Repeat(`{"type":"text","text":"lorem ipsum \"usage\": {\"total_tokens\": 7}"},`, 20000)
	long := `{"total_tokens":5,"pad":"` + strings.Repeat("x", maxUsageValue) + `"}`
	for _, tt := range []struct {
		name, kind, body string
		want             []int
	}{
		{"openai chat", "json", openAIChatBody, []int{29}},
		{"openai chat without total", "json", usageBody(`{"prompt_tokens":19,"completion_tokens":10}`), []int{29}},
		{"openai responses", "json", openAIResponsesBody, []int{380}},
		{"anthropic: input, output and cache creation", "json", anthropicBody, []int{118}},
		{"anthropic without cache fields", "json", `{"type":"message","usage":{"input_tokens":3,"output_tokens":4}}`, []int{7}},
		{"anthropic, null cache creation", "json", `{"usage":{"input_tokens":3,"output_tokens":4,"cache_creation_input_tokens":null}}`, []int{7}},
		{"usage after 1 MiB of content", "json", `{"content":[` + big + `{}],"usage":{"total_tokens":9}}`, []int{9}},
		{"a usage key below the top is not the body's", "json",
			`{"content":[{"type":"tool_use","input":{"usage":{"total_tokens":1}}}],"message":{"usage":{"total_tokens":2}},"stop_reason":"tool_use"}`, nil},
		{"an escaped usage key is none", "json", `{"text":"{\"usage\":{\"total_tokens\":1}}","us\u0061ge":{"total_tokens":2}}`, nil},
		{"the last usage key wins", "json", `{"usage":{"total_tokens":1},"usage":{"total_tokens":2}}`, []int{1, 2}},
		{"whitespace everywhere", "json", " {\n\"usage\" :\t{ \"total_tokens\" : 4 } \r\n} ", []int{4}},
		{"missing", "json", `{"id":"x","choices":[]}`, nil},
		{"null", "json", usageBody(`null`), nil},
		{"an array", "json", usageBody(`[29]`), nil},
		{"empty object", "json", usageBody(`{}`), nil},
		{"only prompt", "json", usageBody(`{"prompt_tokens":19}`), nil},
		{"negative", "json", usageBody(`{"total_tokens":-1}`), nil},
		{"negative part", "json", usageBody(`{"input_tokens":-3,"output_tokens":4}`), nil},
		{"a string", "json", usageBody(`{"total_tokens":"29"}`), nil},
		{"a fraction", "json", usageBody(`{"total_tokens":29.5}`), nil},
		{"a float", "json", usageBody(`{"total_tokens":29.0}`), nil},
		{"an exponent", "json", usageBody(`{"total_tokens":2e1}`), nil},
		{"NaN", "json", usageBody(`{"total_tokens":NaN}`), nil},
		{"a bad count not summed still spoils it", "json", usageBody(`{"total_tokens":29,"prompt_tokens":"x"}`), nil},
		{"the largest", "json", usageBody(`{"total_tokens":2147483647}`), []int{1<<31 - 1}},
		{"huge", "json", usageBody(`{"total_tokens":2147483648}`), nil},
		{"huger", "json", usageBody(`{"total_tokens":99999999999999999999}`), nil},
		{"a huge sum", "json", usageBody(`{"input_tokens":2147483647,"output_tokens":1}`), nil},
		{"a usage too large to read", "json", usageBody(long), nil},
		{"cut in the usage", "json", `{"usage":{"total_tokens":5`, nil},
		{"cut after the usage", "json", `{"usage":{"total_tokens":5},"user":nu`, []int{5}},

		{"openai chat stream", "sse", openAIChatStream, []int{21}},
		{"openai responses stream", "sse", openAIResponsesStream, []int{48}},
		{"anthropic stream: input, then input and output so far", "sse", anthropicStream, []int{26, 40}},
		{"anthropic stream cut after message_delta", "sse", anthropicHead + anthropicDelta, []int{26, 40}},
		{"anthropic stream cut in message_delta", "sse", anthropicHead + strings.TrimSuffix(anthropicDelta, "\n"), []int{26}},
		{"anthropic stream, two deltas", "sse", anthropicHead + anthropicDelta + strings.Replace(anthropicDelta, "15", "30", 1), []int{26, 40, 55}},
		{"anthropic delta with every count", "sse", anthropicHead +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":30,\"cache_creation_input_tokens\":5,\"output_tokens\":9}}\n\n", []int{26, 44}},
		{"anthropic delta with a bad count", "sse", anthropicHead + strings.Replace(anthropicDelta, "15", `"15"`, 1), []int{26}},
		{"anthropic delta with a huge count", "sse", anthropicHead + strings.Replace(anthropicDelta, "15", "4294967296", 1), []int{26}},
		{"CRLF", "sse", strings.ReplaceAll(anthropicStream, "\n", "\r\n"), []int{26, 40}},
		{"CR", "sse", strings.ReplaceAll(anthropicStream, "\n", "\r"), []int{26, 40}},
		{"a BOM, no space after data:, comments", "sse", "\ufeff: hello\ndata:{\"usage\":\n: between\ndata: {\"total_tokens\":3}}\n\n", []int{3}},
		{"data alone is an empty line of data", "sse", "data: {\"usage\"\ndata\ndata: :{\"total_tokens\":3}}\n\n", []int{3}},
		{"not a BOM", "sse", "\xef\xbbdata: {\"usage\":{\"total_tokens\":3}}\n\n", nil},
		{"another field's value", "sse", "id: {\"usage\":{\"total_tokens\":3}}\nevent: {\"usage\":{\"total_tokens\":3}}\n\n", nil},
		{"a field named like data", "sse", "datum: {\"usage\":{\"total_tokens\":3}}\n\ndata : {\"usage\":{\"total_tokens\":3}}\n\n", nil},
		{"usage null in every chunk", "sse", "data: {\"usage\":null}\n\ndata: {\"usage\":null}\n\ndata: [DONE]\n\n", nil},
		{"a usage nested deeper", "sse", "data: {\"response\":{\"output\":{\"usage\":{\"total_tokens\":3}}}}\n\n", nil},
		{"an event too large for its usage", "sse", "data: " + usageBody(long) + "\n\n", nil},
		{"a large event", "sse", "data: {\"content\":[" + big + "{}],\"usage\":{\"total_tokens\":9}}\n\n", []int{9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, n := range []int{0, 1, 2, 3, 7, 64} {
				if got := usageReports(tt.kind, tt.body, n); !slices.Equal(got, tt.want) {
					t.Fatalf("in chunks of %d: reported %v, want %v", n, got, tt.want)
				}
			}
		})
	}
}

// A body of any size costs one usage object of memory at most.
func TestUsageMemoryIsBounded(t *testing.T) {
	content := strings.Repeat(`{"usage":{"total_tokens":1,"pad":"`+strings.Repeat("x", 1000)+`"}},`, 1000)
	s := &jsonUsage{found: func([]byte) {}}
	s.feed([]byte(`{"content":[` + content + `{}],"usage":{"total_tokens":9,"pad":"` + strings.Repeat("y", 1<<20) + `"}}`))
	if cap(s.value) > 2*maxUsageValue {
		t.Errorf("kept %d bytes", cap(s.value))
	}
	e := newSSEUsage(func(int) {})
	e.feed([]byte("data: " + strings.Repeat("z", 1<<20) + "\n\ndata: {\"usage\":{\"pad\":\"" + strings.Repeat("y", 1<<20) + "\"}}\n\n"))
	if cap(e.data.value) > 2*maxUsageValue {
		t.Errorf("an event stream kept %d bytes", cap(e.data.value))
	}
}

// Only an attempt whose usage a shared quota hears, with a plain JSON or
// event stream body, is read.
func TestUsageReaderOnlyWhenWanted(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	if r := newUsageReader(context.Background(), h); r != nil {
		t.Errorf("a reader for an attempt of no shared quota")
	}
	if got := mediaType(http.Header{"Content-Type": {"Application/JSON; charset=utf-8"}}); got != "application/json" {
		t.Errorf("mediaType = %q", got)
	}
	if got := mediaType(http.Header{"Content-Type": {"text/event-stream"}, "Content-Encoding": {"gzip"}}); got != "" {
		t.Errorf("mediaType of an encoded body = %q", got)
	}
}

func TestParseUsageCounts(t *testing.T) {
	for raw, want := range map[string]usageCounts{
		`{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`:                   {3, 1, 2, -1},
		`{"input_tokens":1,"output_tokens":2,"cache_creation_input_tokens":4}`:         {-1, 1, 2, 4},
		`{"input_tokens":1,"output_tokens":2,"cache_read_input_tokens":"not counted"}`: {-1, 1, 2, -1},
		`{"output_tokens":0}`: {-1, -1, 0, -1},
	} {
		if got, ok := parseUsage([]byte(raw)); !ok || got != want {
			t.Errorf("parseUsage(%s) = %v, %v; want %v", raw, got, ok, want)
		}
	}
	for _, raw := range []string{``, ` {}`, `null`, `{`, `{"output_tokens":01}`, `{"output_tokens":-0}`, `{"output_tokens":true}`} {
		if got, ok := parseUsage([]byte(raw)); ok {
			t.Errorf("parseUsage(%s) = %v, true", raw, got)
		}
	}
}

// FuzzUsage feeds any bytes to both readers, whole and in two parts: they
// do not panic, report counts in range, report the same whatever the
// split, and a JSON body's reports agree with encoding/json's reading.
func FuzzUsage(f *testing.F) {
	for _, s := range []string{openAIChatBody, openAIChatStream, openAIResponsesBody, openAIResponsesStream,
		anthropicBody, anthropicStream, usageBody(`{"total_tokens":-1}`), `{"a":[{"usage":{}}],"usage":{"total_tokens":2}}`,
		"data: {\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\r\n\r\n", "\ufeffdata:{}\n\n"} {
		f.Add([]byte(s), uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, body []byte, at uint16) {
		cut := int(at) % (len(body) + 1)
		for _, kind := range []string{"json", "sse"} {
			whole := usageReports(kind, string(body), 0)
			for _, n := range whole {
				if n < 0 || n > maxUsageTokens {
					t.Fatalf("%s reported %d", kind, n)
				}
			}
			if split := splitReports(kind, body, cut); !slices.Equal(whole, split) {
				t.Fatalf("%s: whole %v, split at %d %v", kind, whole, cut, split)
			}
		}
		if want, ok := decodedUsage(body); ok {
			got := usageReports("json", string(body), 0)
			if !slices.Equal(got, want) {
				t.Fatalf("json reported %v, encoding/json reads %v", got, want)
			}
		}
	})
}

// splitReports feeds body to a reader of kind in two parts, at cut.
func splitReports(kind string, body []byte, cut int) []int {
	var got []int
	r := testUsageReader(kind, &got)
	r.feed(body[:cut])
	r.feed(body[cut:])
	return got
}

// decodedUsage returns what a JSON body's reader should report, read with
// encoding/json, if body is one JSON object without escapes (which the
// reader does not decode in keys).
func decodedUsage(body []byte) ([]int, bool) {
	if bytes.IndexByte(body, '\\') >= 0 || !json.Valid(body) || bytes.TrimSpace(body)[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.Token() // {
	var want []int
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, false
		}
		if key != "usage" || len(raw) == 0 || raw[0] != '{' || len(raw) > maxUsageValue {
			continue
		}
		if n, ok := usageTokens(raw); ok {
			want = append(want, n)
		}
	}
	if _, err := dec.Token(); err != nil && err != io.EOF {
		return nil, false
	}
	return want, true
}

// BenchmarkUsage reads a 1 MiB body, JSON or an event stream, in 32 KiB
// Reads.
func BenchmarkUsage(b *testing.B) {
	text := strings.Repeat(`{"type":"text","text":"lorem ipsum dolor sit amet, \"quoted\""},`, 16000)
	delta := `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lorem ipsum dolor sit amet"}}` + "\n\n"
	for _, bb := range []struct{ kind, body string }{
		{"json", `{"content":[` + text + `{}],"usage":{"input_tokens":3,"output_tokens":4}}`},
		{"sse", anthropicHead + strings.Repeat(delta, (1<<20)/len(delta)) + anthropicDelta},
	} {
		b.Run(bb.kind, func(b *testing.B) {
			body := []byte(bb.body)
			b.SetBytes(int64(len(body)))
			var got []int
			for b.Loop() {
				got = got[:0]
				r := testUsageReader(bb.kind, &got)
				for p := body; len(p) > 0; {
					n := min(len(p), 32<<10)
					r.feed(p[:n])
					p = p[n:]
				}
			}
			if len(got) == 0 {
				b.Fatal("no usage")
			}
		})
	}
}
