package httppolicy

import (
	"net/http"
	"strings"
	"testing"
)

// refCountEvents is a reference reading of a whole event stream, written
// from the HTML Living Standard's "event stream interpretation" as plainly
// as possible: the events that count (with data, of a type not in keep).
func refCountEvents(stream string, keep []string) int {
	stream = strings.TrimPrefix(stream, "\uFEFF")
	var lines []string
	start := 0
	for i := 0; i < len(stream); i++ {
		switch stream[i] {
		case '\r':
			lines = append(lines, stream[start:i])
			if i+1 < len(stream) && stream[i+1] == '\n' {
				i++
			}
			start = i + 1
		case '\n':
			lines = append(lines, stream[start:i])
			start = i + 1
		}
	}
	isKeep := func(typ string) bool {
		if typ == "" {
			typ = "message"
		}
		for _, k := range keep {
			if k == typ {
				return true
			}
		}
		return false
	}
	// An event with more than maxKeepaliveData bytes of data values counts
	// once that much is in, whatever its type, ended or not.
	n, data, typ, size, large := 0, false, "", 0, false
	addData := func(value string) {
		if size += len(value); !large && size > maxKeepaliveData {
			large = true
			n++
		}
	}
	for _, line := range lines {
		switch {
		case line == "":
			if data && !isKeep(typ) && !large {
				n++
			}
			data, typ, size, large = false, "", 0, false
		case line[0] == ':':
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "data":
				data = true
				addData(value)
			case "event":
				typ = value
			}
		}
	}
	// An unfinished data line's value is data all the same.
	if field, value, ok := strings.Cut(stream[start:], ":"); ok && field == "data" {
		addData(strings.TrimPrefix(value, " "))
	}
	return n
}

// refPending is a reference reading of the bytes of the event being read
// at the end of a stream: its lines since the last blank line, line ends
// included, comment lines aside. All other bytes are keepalives, or came
// before an event that counted.
func refPending(stream string) int {
	stream = strings.TrimPrefix(stream, "\uFEFF")
	pending := 0
	for start := 0; start < len(stream); {
		line, next := stream[start:], len(stream)
		end := strings.IndexAny(line, "\r\n")
		if end >= 0 {
			line, next = stream[start:start+end], start+end+1
			if stream[start+end] == '\r' && next < len(stream) && stream[next] == '\n' {
				next++
			}
		}
		switch {
		case end >= 0 && line == "":
			pending = 0 // a blank line ends the event
		case line[0] != ':':
			pending += next - start
		}
		start = next
	}
	return pending
}

// scanChunks scans stream split at the given offsets. It returns the
// events that count and the bytes the scanner holds as the event being
// read.
func scanChunks(stream []byte, keep []string, cuts ...int) (events, pending int) {
	s := newSSEScanner(keep)
	prev := 0
	for _, c := range cuts {
		events += s.scan(stream[prev:c])
		prev = c
	}
	events += s.scan(stream[prev:])
	return events, s.read - s.kept
}

var sseCases = []struct {
	name   string
	stream string
	want   int
}{
	{"openai chunks", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n", 3},
	{"comment keepalives", ": ping\n\n: ping\n\n", 0},
	{"comment then event", ": ping\n\ndata: x\n\n", 1},
	{"anthropic ping", "event: ping\ndata: {\"type\": \"ping\"}\n\n", 0},
	{"anthropic message", "event: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_delta\ndata: {}\n\n", 1},
	{"event after data", "data: {}\nevent: ping\n\n", 0},
	{"last event line wins", "event: ping\nevent: delta\ndata: x\n\n", 1},
	{"ping without space", "event:ping\ndata:x\n\n", 0},
	{"two spaces are part of the name", "event:  ping\ndata: x\n\n", 1},
	{"CRLF", "event: ping\r\ndata: p\r\n\r\ndata: x\r\n\r\n", 1},
	{"CR", "event: ping\rdata: p\r\rdata: x\r\r", 1},
	{"mixed endings", "data: a\r\n\rdata: b\n\r\n", 2},
	{"no data: not dispatched", "event: delta\n\nid: 3\n\nretry: 10\n\n", 0},
	{"empty data field counts", "data:\n\n", 1},
	{"data field without colon", "data\n\n", 1},
	{"unfinished event", "data: x\n", 0},
	{"unfinished line", "data: x", 0},
	{"BOM", "\uFEFFdata: x\n\n", 1},
	{"BOM before a comment", "\uFEFF: hi\n\n", 0},
	{"not a BOM", "\xEFdata: x\n\n", 0},
	{"datax is another field", "datax: 1\n\n", 0},
	{"event field without colon resets to message", "event: ping\nevent\ndata: x\n\n", 1},
	{"long event name", "event: " + strings.Repeat("p", 200) + "\ndata: x\n\n", 1},
	{"keepalive data lines with colons", "event: ping\ndata: a:b\ndata: : c\n\n", 0},
	{"comment inside an event", "data: x\n: ping\n\n", 1},
	{"blank lines alone", "\n\n\r\n\r", 0},
	{"keepalive with the most data", "event: ping\ndata: " + strings.Repeat("p", maxKeepaliveData) + "\n\n", 0},
	{"keepalive with more data is data", "event: ping\ndata:" + strings.Repeat("p", maxKeepaliveData+1) + "\n\n", 1},
	{"large data over lines, typed after", strings.Repeat("data: "+strings.Repeat("d", 1000)+"\n", 5) + "event: ping\n\n", 1},
	{"large unfinished event", "event: ping\ndata: " + strings.Repeat("u", maxKeepaliveData+1), 1},
	{"fields of the event being read", ": p\n\nevent: delta\r\nid: 1\rretry: 5\n: c\ndata", 0},
	{"unfinished BOM", "\xEF\xBB", 0},
	{"blank lines end events that do not count", "id: 1\n\nevent: ping\r\ndata: p\r\n\r\nid: 2\r", 0},
}

func TestSSEScanner(t *testing.T) {
	keep := []string{"ping"}
	for _, tt := range sseCases {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.stream)
			if got := refCountEvents(tt.stream, keep); got != tt.want {
				t.Fatalf("reference reading = %d, want %d", got, tt.want)
			}
			wantPending := refPending(tt.stream)
			if got, pending := scanChunks(b, keep); got != tt.want || pending != wantPending {
				t.Fatalf("one chunk: %d events, %d bytes pending; want %d, %d", got, pending, tt.want, wantPending)
			}
			for cut := 0; cut <= len(b); cut++ {
				if got, pending := scanChunks(b, keep, cut); got != tt.want || pending != wantPending {
					t.Fatalf("split at %d (%q | %q): %d events, %d bytes pending; want %d, %d",
						cut, b[:cut], b[cut:], got, pending, tt.want, wantPending)
				}
			}
			cuts := make([]int, 0, len(b))
			for i := 1; i < len(b); i++ {
				cuts = append(cuts, i)
			}
			if got, pending := scanChunks(b, keep, cuts...); got != tt.want || pending != wantPending {
				t.Fatalf("byte by byte: %d events, %d bytes pending; want %d, %d", got, pending, tt.want, wantPending)
			}
		})
	}
}

// TestSSEScannerLargeEventReads checks which chunks of a stream restart
// the idle timer around an event too large for a keepalive: those with its
// data or its end, not the comments and fields beside them.
func TestSSEScannerLargeEventReads(t *testing.T) {
	w := &streamWatch{sse: newSSEScanner(defaultKeepaliveEvents)}
	chunks := []struct {
		data   string
		counts bool
	}{
		{"data: " + strings.Repeat("x", maxKeepaliveData), false},
		{"x", true}, // the first byte over the bound
		{strings.Repeat("x", 1000), true},
		{"\n: ping\n", false},
		{"event: ping\n", false},
		{"data:", false},
		{"y", true},
		{"\n", false},
		{"\n", true}, // its end
		{"data: small\n", false},
		{": ping\n", false},
		{"\n", true},
	}
	for i, c := range chunks {
		if got := w.counts([]byte(c.data)); got != c.counts {
			t.Fatalf("chunk %d %.20q: counts %v, want %v", i, c.data, got, c.counts)
		}
	}
}

func TestSSEScannerKeepaliveNames(t *testing.T) {
	stream := []byte("data: plain\n\nevent: ping\ndata: p\n\nevent: hb\ndata: h\n\n")
	tests := []struct {
		keep []string
		want int
	}{
		{nil, 3},
		{[]string{"ping"}, 2},
		{[]string{"ping", "hb"}, 1},
		{[]string{"message"}, 2}, // an event without an event: line is a "message"
		{[]string{"ping", "hb", "message"}, 0},
	}
	for _, tt := range tests {
		if got, _ := scanChunks(stream, tt.keep); got != tt.want {
			t.Errorf("keep %q: %d events, want %d", tt.keep, got, tt.want)
		}
	}
}

func TestIsEventStream(t *testing.T) {
	tests := []struct {
		ct   string
		want bool
	}{
		{"text/event-stream", true},
		{"text/event-stream; charset=utf-8", true},
		{"Text/Event-Stream;charset=utf-8", true},
		{" text/event-stream ", true},
		{"text/event-streams", false},
		{"text/event", false},
		{"application/json", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := isEventStream(http.Header{"Content-Type": {tt.ct}}); got != tt.want {
			t.Errorf("isEventStream(%q) = %v, want %v", tt.ct, got, tt.want)
		}
	}
}

// FuzzSSEScanner checks the scanner, fed in chunks cut anywhere, against
// the reference readings of the whole stream: the events that count, and
// the bytes of the event being read at its end.
func FuzzSSEScanner(f *testing.F) {
	for _, tt := range sseCases {
		f.Add([]byte(tt.stream), uint16(3), uint16(7), false)
	}
	f.Add([]byte("event: ping\r"), uint16(12), uint16(0), true)
	f.Add([]byte("\xEF\xBB"), uint16(1), uint16(2), false)
	f.Fuzz(func(t *testing.T, stream []byte, cut1, cut2 uint16, keepMessage bool) {
		keep := []string{"ping"}
		if keepMessage {
			keep = append(keep, "message")
		}
		want, wantPending := refCountEvents(string(stream), keep), refPending(string(stream))
		a, b := int(cut1)%(len(stream)+1), int(cut2)%(len(stream)+1)
		if a > b {
			a, b = b, a
		}
		if got, pending := scanChunks(stream, keep, a, b); got != want || pending != wantPending {
			t.Fatalf("cut at %d and %d: %d events, %d bytes pending; reference %d, %d", a, b, got, pending, want, wantPending)
		}
	})
}

func BenchmarkSSEScanner(b *testing.B) {
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, world\"}}\n\n")
	s := newSSEScanner(defaultKeepaliveEvents)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		s.scan(chunk)
	}
}
