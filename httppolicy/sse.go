package httppolicy

import (
	"bytes"
	"mime"
	"net/http"
	"slices"
	"strings"
)

// defaultKeepaliveEvents is what a nil Transport.KeepaliveEvents means.
var defaultKeepaliveEvents = []string{"ping"}

func (t *Transport) keepalives() []string {
	if t.KeepaliveEvents == nil {
		return defaultKeepaliveEvents
	}
	return t.KeepaliveEvents
}

// maxEventName bounds the event type matched against keepalive names. An
// event with more than maxKeepaliveData bytes of data counts at once,
// whatever its type. The scanner keeps the first sseHead bytes of a line.
const (
	maxEventName     = 64
	maxKeepaliveData = 4 << 10
	sseHead          = len("event: ") + maxEventName + 1
)

var bom = [3]byte{0xEF, 0xBB, 0xBF}

// isEventStream reports whether h is that of a text/event-stream body
// that is not encoded: only then can its keepalives be told apart.
func isEventStream(h http.Header) bool { return mediaType(h) == "text/event-stream" }

// mediaType returns the media type of h's Content-Type, lower case, or ""
// if the body is encoded: only a plain body can be read as it comes.
func mediaType(h http.Header) string {
	for _, ce := range h["Content-Encoding"] {
		if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
			return ""
		}
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt
}

// sseScanner follows a text/event-stream body, as the HTML Living
// Standard reads it, far enough to tell when an event that counts is
// complete: one with data, whose type is not a keepalive name. The bytes
// of the event being read, comment lines aside, are not keepalives.
type sseScanner struct {
	keep        []string // keepalive event names
	keepMessage bool     // "message", the type of an event with no event: line, is one

	bomSeen int  // bytes of a leading BOM matched; -1 once past it
	cr      bool // the last byte was a CR that ended a line
	crKeep  bool // that line was a keepalive's

	read int // bytes scanned
	kept int // bytes scanned that are keepalives: all but the event being read

	head  []byte // the current line's first sseHead bytes
	lineN int    // the current line's length

	data      bool // the current event has a data field
	keepalive bool // the current event's type is a keepalive name
	dataLen   int  // bytes of the current event's data values, up to maxKeepaliveData+1
	large     bool // the current event has counted for its data's size
	largeRead bool // the last scan read data values of a large event, or its end

	// With a StreamEnd: the current event's type and data, each kept only
	// while short enough to match, and whether the end event came.
	end             *StreamEnd
	evType, evData  []byte
	typeLong, dLong bool
	dataLines       int
	ended           bool
}

// cut reports whether the stream ended without its StreamEnd event.
func (s *sseScanner) cut() bool { return s != nil && s.end != nil && !s.ended }

// endField keeps in dst the field value v of a line that was whole in the
// scanner's head if whole, or reports it too long.
func endField(dst []byte, v []byte, whole bool) ([]byte, bool) {
	if !whole || len(dst)+len(v) > maxEndField {
		return dst[:0], true
	}
	return append(dst, v...), false
}

// matchEnd records whether the event being dispatched, if it has data, is
// the StreamEnd, and forgets it: a blank line ends every event, sent or not.
func (s *sseScanner) matchEnd() {
	e := s.end
	typ := string(s.evType)
	if typ == "" {
		typ = "message"
	}
	if s.data && (e.Event == "" || !s.typeLong && typ == e.Event) && (e.Data == "" || !s.dLong && string(s.evData) == e.Data) {
		s.ended = true
	}
	s.evType, s.evData = s.evType[:0], s.evData[:0]
	s.typeLong, s.dLong, s.dataLines = false, false, 0
}

func newSSEScanner(keep []string) *sseScanner {
	s := &sseScanner{keep: keep, head: make([]byte, 0, sseHead)}
	s.keepMessage = s.isKeepalive(nil)
	s.keepalive = s.keepMessage
	return s
}

// isKeepalive reports whether the event type name (empty: "message") is a
// keepalive name.
func (s *sseScanner) isKeepalive(name []byte) bool {
	if len(name) == 0 {
		name = []byte("message")
	}
	return slices.ContainsFunc(s.keep, func(k string) bool { return string(name) == k })
}

// scan reads the next chunk and reports how many events that count it
// completed or found large.
func (s *sseScanner) scan(p []byte) int {
	s.largeRead = false
	events, i := 0, 0
	if s.bomSeen >= 0 {
		i = s.scanBOM(p)
	}
	for i < len(p) {
		if s.cr && p[i] == '\n' { // CRLF, perhaps split between chunks
			if s.crKeep {
				s.kept++
			}
			i++
		}
		s.cr = false
		j := bytes.IndexAny(p[i:], "\r\n")
		if j < 0 {
			j = len(p) - i
		}
		events += s.feed(p[i : i+j])
		if i += j; i < len(p) {
			s.cr = p[i] == '\r'
			if s.endLine(s.read + i) {
				events++
			}
			i++
		}
	}
	s.read += len(p)
	return events
}

// scanBOM reads what p holds of a leading BOM and returns its length.
func (s *sseScanner) scanBOM(p []byte) int {
	i := 0
	for ; i < len(p) && p[i] == bom[s.bomSeen]; i++ {
		if s.bomSeen++; s.bomSeen == len(bom) {
			s.bomSeen = -1
			s.kept += len(bom)
			return i + 1
		}
	}
	if i < len(p) {
		s.feed(bom[:s.bomSeen]) // not a BOM: those bytes begin a line
		s.bomSeen = -1
	}
	return i
}

// feed adds seg to the current line and reports whether it made the
// event large.
func (s *sseScanner) feed(seg []byte) int {
	if len(seg) == 0 {
		return 0
	}
	before := s.dataValueLen()
	s.head = append(s.head, seg[:min(len(seg), sseHead-len(s.head))]...)
	s.lineN += len(seg)
	if s.head[0] == ':' {
		s.kept += len(seg)
		return 0
	}
	n := s.dataValueLen() - before
	switch {
	case n == 0:
	case s.large:
		s.largeRead = true
	default:
		s.dataLen += n
		s.large = s.dataLen > maxKeepaliveData
		if s.large {
			return 1
		}
	}
	return 0
}

// dataValueLen returns the length of the current line's value if it is a
// data line, else 0.
func (s *sseScanner) dataValueLen() int {
	if s.lineN <= len("data:") || string(s.head[:5]) != "data:" {
		return 0
	}
	if s.head[5] == ' ' {
		return s.lineN - 6
	}
	return s.lineN - 5
}

// endLine ends the current line at offset at of the stream and reports
// whether it dispatched an event that counts.
func (s *sseScanner) endLine(at int) bool {
	line := s.head
	blank, comment := s.lineN == 0, s.lineN > 0 && line[0] == ':'
	whole := s.lineN <= len(line) // the head holds the whole line
	s.head, s.lineN = s.head[:0], 0
	s.crKeep = blank || comment
	switch {
	case comment:
		s.kept++
	case blank:
		// A blank line dispatches the event: all before it is settled.
		s.kept = at + 1
		if s.end != nil {
			s.matchEnd()
		}
		counts := s.data && !s.keepalive && !s.large
		s.largeRead = s.largeRead || s.large
		s.data, s.keepalive, s.dataLen, s.large = false, s.keepMessage, 0, false
		return counts
	default:
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			s.data = true
			if s.end != nil {
				if s.dataLines++; s.dataLines > 1 {
					s.evData, s.dLong = endField(s.evData, []byte("\n"), !s.dLong)
				}
				s.evData, s.dLong = endField(s.evData, value, whole && !s.dLong)
			}
		case "event":
			s.keepalive = len(value) <= maxEventName && s.isKeepalive(value)
			if s.end != nil {
				s.evType, s.typeLong = endField(s.evType[:0], value, whole)
			}
		}
	}
	return false
}
