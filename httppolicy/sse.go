package httppolicy

import (
	"bytes"
	"strings"
)

// defaultKeepaliveEvents is what a nil Transport.KeepaliveEvents means.
var defaultKeepaliveEvents = []string{"ping"}

// maxEventName bounds the event type kept for matching: a longer one
// matches no keepalive name.
const maxEventName = 64

// maxKeepaliveData bounds the data of a keepalive: an event with more
// counts as soon as that much is in, whatever its type.
const maxKeepaliveData = 4 << 10

// isEventStream reports whether the Content-Type value ct is
// text/event-stream, parameters and case aside.
func isEventStream(ct string) bool {
	const mt = "text/event-stream"
	ct = strings.TrimLeft(ct, " \t")
	if len(ct) < len(mt) || !strings.EqualFold(ct[:len(mt)], mt) {
		return false
	}
	rest := ct[len(mt):]
	return rest == "" || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t'
}

// Line states of the scanner.
const (
	sseLineStart  = iota // no byte of the line yet
	sseFieldName         // in the field name, before any colon
	sseValueStart        // just after the colon: one space may follow
	sseValue             // in the value of a field
	sseSkip              // in a value that does not matter
	sseComment           // in a comment line
)

// Fields the scanner tells apart.
const (
	sseOther = iota
	sseData
	sseEvent
)

// sseScanner follows a text/event-stream body, as the HTML Living
// Standard reads it, far enough to tell when an event that counts is
// complete: one with data, whose type is not a keepalive name. An event
// whose data passes maxKeepaliveData counts at once. The bytes of the
// event being read, comment lines aside, are the only ones that are not
// keepalives. Chunks may split the stream anywhere.
type sseScanner struct {
	keep        []string // keepalive event names
	keepMessage bool     // "message", the type of an event with no event: line, is a keepalive

	bomDone bool
	bomSeen int  // bytes of the BOM matched so far
	cr      bool // the last byte was a CR
	crKeep  bool // that CR ended a line of keepalive bytes

	read int // bytes scanned
	kept int // bytes scanned that are keepalives: all but the event being read

	state   int
	field   int // the current line's field, once known
	name    [5]byte
	nameLen int // bytes of the field name seen (may exceed len(name))
	val     [maxEventName]byte
	valLen  int // bytes of an event: value seen (may exceed len(val))

	data      bool // the current event has a data field
	keepalive bool // the current event's type is a keepalive name
	dataLen   int  // bytes of the current event's data values, up to maxKeepaliveData+1
	large     bool // the current event has counted for its data's size
	largeRead bool // the last scan read data values of a large event, or its end
}

func newSSEScanner(keep []string) *sseScanner {
	s := &sseScanner{keep: keep}
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
	for _, k := range s.keep {
		if string(name) == k {
			return true
		}
	}
	return false
}

var bom = [3]byte{0xEF, 0xBB, 0xBF}

// scan reads the next chunk and reports how many events that count it
// completed or found large.
func (s *sseScanner) scan(p []byte) int {
	s.largeRead = false
	events := 0
	i := 0
	if !s.bomDone {
		i = s.scanBOM(p)
	}
	for i < len(p) {
		c := p[i]
		if s.cr {
			s.cr = false
			if c == '\n' {
				if s.crKeep {
					s.kept++
				}
				i++
				continue
			}
		}
		if c == '\r' || c == '\n' {
			if s.endLine(s.read + i) {
				events++
			}
			s.cr = c == '\r'
			i++
			continue
		}
		switch s.state {
		case sseLineStart:
			if c == ':' {
				s.state = sseComment
				s.kept++
				i++
				continue
			}
			s.state, s.nameLen = sseFieldName, 0
			fallthrough
		case sseFieldName:
			if c == ':' {
				s.field = s.fieldKind()
				s.state = sseValueStart
				s.valLen = 0
				i++
				continue
			}
			if s.nameLen < len(s.name) {
				s.name[s.nameLen] = c
			}
			s.nameLen++
			i++
		case sseValueStart:
			s.state = sseValue
			if s.field != sseEvent {
				s.state = sseSkip
			}
			if c == ' ' {
				i++
				continue
			}
			if s.state == sseSkip {
				continue
			}
			fallthrough
		case sseValue: // an event: value
			if s.valLen < len(s.val) {
				s.val[s.valLen] = c
			}
			s.valLen++
			i++
		case sseComment:
			j := lineLen(p[i:])
			s.kept += j
			i += j
		default: // sseSkip: on to the end of the line
			j := lineLen(p[i:])
			if s.field == sseData && s.addData(j) {
				events++
			}
			i += j
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
			s.bomDone = true
			s.kept += len(bom)
			return i + 1
		}
	}
	if i < len(p) {
		s.bomDone = true
		if s.bomSeen > 0 {
			// Those bytes began a field name that matches no field.
			s.state, s.field, s.nameLen = sseFieldName, sseOther, len(s.name)+1
		}
	}
	return i
}

// lineLen returns the length of p up to its first line end.
func lineLen(p []byte) int {
	if j := bytes.IndexAny(p, "\r\n"); j >= 0 {
		return j
	}
	return len(p)
}

// addData adds n bytes to the current event's data values and reports
// whether they made it large.
func (s *sseScanner) addData(n int) bool {
	if s.large {
		s.largeRead = s.largeRead || n > 0
		return false
	}
	s.dataLen = min(s.dataLen+n, maxKeepaliveData+1)
	s.large = s.dataLen > maxKeepaliveData
	return s.large
}

// fieldKind classifies the field name read so far.
func (s *sseScanner) fieldKind() int {
	switch {
	case s.nameLen == 4 && string(s.name[:4]) == "data":
		return sseData
	case s.nameLen == 5 && string(s.name[:5]) == "event":
		return sseEvent
	}
	return sseOther
}

// endLine ends the current line at offset at of the stream and reports
// whether it dispatched an event that counts.
func (s *sseScanner) endLine(at int) bool {
	state := s.state
	s.state = sseLineStart
	s.crKeep = state == sseLineStart || state == sseComment
	switch state {
	case sseComment:
		s.kept++
	case sseLineStart:
		// A blank line dispatches the event: all before it is settled.
		s.kept = at + 1
		counts := s.data && !s.keepalive && !s.large
		s.largeRead = s.largeRead || s.large
		s.data, s.keepalive = false, s.keepMessage
		s.dataLen, s.large = 0, false
		return counts
	case sseFieldName:
		// A field with no colon has an empty value.
		s.field = s.fieldKind()
		s.valLen = 0
	}
	switch s.field { // sseOther after a comment
	case sseData:
		s.data = true
	case sseEvent:
		s.keepalive = s.valLen <= len(s.val) && s.isKeepalive(s.val[:s.valLen])
	}
	s.field = sseOther
	return false
}
