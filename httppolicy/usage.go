package httppolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/watertight/watertight/ratelimit"
)

// maxUsageTokens is the largest count a usage object may give: a larger
// one is no count. maxUsageValue bounds the bytes of a usage object read:
// a larger one is not. A key is compared only while it fits in
// maxUsageKey bytes.
const (
	maxUsageTokens = 1<<31 - 1
	maxUsageValue  = 4 << 10
	maxUsageKey    = len("response")
)

// usageReader reads the usage of a body as the caller reads the body, and
// reports it to the attempt's shared quota.
type usageReader interface {
	feed(p []byte)
}

// newUsageReader returns the usage reader of a response with header h to
// the attempt run with ctx, or nil if no shared quota hears the attempt's
// usage or the body is neither JSON nor an event stream: only then is
// any of it read.
func newUsageReader(ctx context.Context, h http.Header) usageReader {
	if !ratelimit.WantsUsage(ctx) {
		return nil
	}
	report := func(n int) { ratelimit.ReportUsage(ctx, n) }
	switch mediaType(h) {
	case "text/event-stream":
		return newSSEUsage(report)
	case "application/json":
		return &jsonUsage{found: func(raw []byte) {
			if n, ok := usageTokens(raw); ok {
				report(n)
			}
		}}
	}
	return nil
}

// readUsage reads the usage of a whole body held in memory, b, from a
// response with header h to the attempt run with ctx.
func readUsage(ctx context.Context, h http.Header, b []byte) {
	if r := newUsageReader(ctx, h); r != nil {
		r.feed(b)
	}
}

// readMemUsage reads the usage of body, held in memory, without moving
// its offset: the caller reads it from the start.
func readMemUsage(ctx context.Context, h http.Header, body memBody) {
	r := newUsageReader(ctx, h)
	if r == nil {
		return
	}
	var buf [4 << 10]byte
	for off := int64(0); ; {
		n, err := body.ReadAt(buf[:], off)
		r.feed(buf[:n])
		if off += int64(n); err != nil {
			return
		}
	}
}

// usageCounts are the counts of a usage object, or of several merged in
// the order they came. A count of -1 is absent.
type usageCounts struct {
	total, input, output, cacheCreation int
}

func noCounts() usageCounts { return usageCounts{-1, -1, -1, -1} }

// parseUsage reads the usage object raw, OpenAI's or Anthropic's. It
// reports false if raw is not a JSON object, or if any count it reads is
// not a JSON integer from 0 to maxUsageTokens (null is absent): a count
// that cannot be trusted makes the whole object untrusted.
func parseUsage(raw []byte) (usageCounts, bool) {
	// A map, not a struct: encoding/json matches a struct's keys without
	// regard to case, and these keys are exact.
	var f map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &f) != nil {
		return noCounts(), false
	}
	c := noCounts()
	for _, x := range [...]struct {
		dst *int
		key string
	}{
		{&c.total, "total_tokens"}, {&c.input, "prompt_tokens"}, {&c.output, "completion_tokens"},
		{&c.input, "input_tokens"}, {&c.output, "output_tokens"}, {&c.cacheCreation, "cache_creation_input_tokens"},
	} {
		n, ok := count(f[x.key])
		if !ok {
			return noCounts(), false
		}
		if n >= 0 {
			*x.dst = n
		}
	}
	return c, true
}

// count reads one count: -1 if absent or null, false if it is not a JSON
// integer from 0 to maxUsageTokens.
func count(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return -1, true
	}
	if len(raw) > len("2147483647") {
		return 0, false
	}
	n := 0
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= maxUsageTokens
}

// merge sets in c the counts that d has.
func (c *usageCounts) merge(d usageCounts) {
	for _, x := range [...][2]*int{{&c.total, &d.total}, {&c.input, &d.input}, {&c.output, &d.output}, {&c.cacheCreation, &d.cacheCreation}} {
		if *x[1] >= 0 {
			*x[0] = *x[1]
		}
	}
}

// tokens returns the tokens c counts: its total if it has one, else its
// input, output and cache creation (Anthropic's, absent: 0). It reports
// false if c has neither a total nor input and output, or if their sum is
// above maxUsageTokens.
func (c usageCounts) tokens() (int, bool) {
	switch {
	case c.total >= 0:
		return c.total, true
	case c.input < 0 || c.output < 0:
		return 0, false
	}
	n := c.input + c.output + max(c.cacheCreation, 0)
	return n, n <= maxUsageTokens
}

// usageTokens returns the tokens the usage object raw counts.
func usageTokens(raw []byte) (int, bool) {
	c, ok := parseUsage(raw)
	if !ok {
		return 0, false
	}
	return c.tokens()
}

// What a key of an object on the path to a usage leads to.
const (
	leadsNowhere = iota
	leadsToUsage
	leadsToObject // "response" or "message", whose own "usage" is read
)

// jsonUsage follows a JSON text as it comes, byte by byte, just far
// enough to find the usage objects it holds: the value of the top
// object's "usage" key and, if nested (an event's data), that of its
// "response" (OpenAI's Responses API) or "message" (Anthropic's
// message_start) object. It hands each one, whole, to found. It keeps no
// more than one usage object, of at most maxUsageValue bytes, so a body
// of any size costs a few KiB.
type jsonUsage struct {
	nested bool
	found  func(raw []byte)

	depth     int  // containers open
	on        int  // the containers at depths 1..on are objects on the path to a usage
	inString  bool // in a string
	escape    bool // after a backslash in a string
	expectKey bool // the next string at depth on is a key
	readKey   bool // the string being read is a key at depth on
	key       [maxUsageKey]byte
	keyN      int // bytes of the key read; -1: too long or escaped, matching none
	leads     int // where the last key at depth on leads
	next      int // where the value after a colon at depth on leads

	value   []byte // the usage object being read
	valueAt int    // the depth of its key: the object ends as depth comes back to it
	inValue bool
	long    bool // the usage object grew past maxUsageValue
}

// reset makes s read a new JSON text.
func (s *jsonUsage) reset() {
	*s = jsonUsage{nested: s.nested, found: s.found, value: s.value[:0]}
}

// feed reads the next bytes of the text.
func (s *jsonUsage) feed(p []byte) {
	for i := 0; i < len(p); i++ {
		if s.inValue {
			s.keep(p[i])
		}
		if !s.inString {
			s.structural(p[i])
			continue
		}
		if !s.inValue && !s.readKey && !s.escape {
			// The plain bytes of a string that is no key: skipped at once.
			j := bytes.IndexAny(p[i:], `"\`)
			if j < 0 {
				return
			}
			i += j
		}
		s.stringByte(p[i])
	}
}

// keep adds c to the usage object being read.
func (s *jsonUsage) keep(c byte) {
	if len(s.value) < maxUsageValue {
		s.value = append(s.value, c)
	} else {
		s.long = true
	}
}

// stringByte reads c, a byte of a string.
func (s *jsonUsage) stringByte(c byte) {
	switch {
	case s.escape:
		s.escape = false
	case c == '\\':
		s.escape = true
		s.keyN = -1
	case c == '"':
		s.inString = false
		if s.readKey {
			s.readKey = false
			s.leads = s.keyLeads()
		}
	case !s.readKey || s.keyN < 0:
	case s.keyN == len(s.key):
		s.keyN = -1
	default:
		s.key[s.keyN] = c
		s.keyN++
	}
}

// structural reads c, a byte outside strings.
func (s *jsonUsage) structural(c byte) {
	switch c {
	case ' ', '\t', '\n', '\r':
	case '"':
		s.inString = true
		s.readKey = s.expectKey && s.depth == s.on
		s.expectKey, s.keyN, s.next, s.leads = false, 0, leadsNowhere, leadsNowhere
	case '{', '[':
		s.open(c == '{')
	case '}', ']':
		s.close()
	case ':':
		if s.depth == s.on {
			s.next, s.leads = s.leads, leadsNowhere
		}
	case ',':
		if s.depth == s.on {
			s.expectKey, s.next = true, leadsNowhere
		}
	default: // a number, true, false or null: it leads nowhere
		s.next = leadsNowhere
	}
}

// open reads the start of an object (obj) or array.
func (s *jsonUsage) open(obj bool) {
	next := s.next
	s.next, s.leads = leadsNowhere, leadsNowhere
	s.depth++
	switch {
	case !obj:
	case next == leadsToUsage:
		s.inValue, s.long, s.valueAt = true, false, s.depth-1
		s.value = append(s.value[:0], '{')
	case next == leadsToObject || s.depth == 1:
		s.on, s.expectKey = s.depth, true
	}
}

// close reads the end of an object or array.
func (s *jsonUsage) close() {
	if s.depth == 0 {
		return // not JSON: nothing to end
	}
	s.on = min(s.on, s.depth-1)
	s.depth--
	s.next, s.leads, s.expectKey = leadsNowhere, leadsNowhere, false
	if s.inValue && s.depth == s.valueAt {
		s.inValue = false
		if !s.long {
			s.found(s.value)
		}
	}
}

// keyLeads returns where the key just read, at depth on, leads.
func (s *jsonUsage) keyLeads() int {
	if s.keyN < 0 {
		return leadsNowhere
	}
	switch k := string(s.key[:s.keyN]); {
	case k == "usage" && (s.depth == 1 || s.nested && s.depth == 2):
		return leadsToUsage
	case s.nested && s.depth == 1 && (k == "response" || k == "message"):
		return leadsToObject
	}
	return leadsNowhere
}

// sseUsage follows a text/event-stream body as it comes, as the HTML
// Living Standard reads it, and reads the data of each event as a JSON
// text for its usage. As each event with usage is dispatched (its blank
// line read), it merges that usage into what it has and reports the
// tokens: Anthropic's counts come in parts (input in message_start,
// output, cumulative, in each message_delta), and a stream cut after a
// message_delta still reports what it got. Its memory is that of its
// jsonUsage, whatever the size of an event.
type sseUsage struct {
	data   jsonUsage   // the data of the event being read
	report func(int)   // reports the tokens
	got    usageCounts // the usage of the events dispatched, merged
	event  usageCounts // the usage of the event being read
	found  bool        // the event being read has a usage
	bad    bool        // it has a usage that is not read

	bom       int  // bytes of a leading BOM matched; -1 once past it
	cr        bool // the last byte was a CR that ended a line
	nameN     int  // bytes of the current line's field name read
	name      [len("data")]byte
	named     bool // the current line's colon was read
	isData    bool // the current line is a data line
	space     bool // a space after the colon is still skipped
	dataLines int  // the data lines of the event being read
}

func newSSEUsage(report func(int)) *sseUsage {
	s := &sseUsage{report: report, got: noCounts(), event: noCounts()}
	s.data = jsonUsage{nested: true, found: s.foundUsage}
	return s
}

// foundUsage takes a usage object of the event being read.
func (s *sseUsage) foundUsage(raw []byte) {
	c, ok := parseUsage(raw)
	if !ok {
		s.bad = true
		return
	}
	s.event.merge(c)
	s.found = true
}

// feed reads the next bytes of the stream.
func (s *sseUsage) feed(p []byte) {
	if s.bom >= 0 {
		p = s.skipBOM(p)
	}
	for len(p) > 0 {
		if s.cr && p[0] == '\n' { // CRLF, perhaps split between chunks
			p = p[1:]
		}
		s.cr = false
		j := bytes.IndexAny(p, "\r\n")
		if j < 0 {
			s.segment(p)
			return
		}
		s.segment(p[:j])
		s.cr = p[j] == '\r'
		s.endLine()
		p = p[j+1:]
	}
}

// skipBOM returns p past what it holds of a leading BOM.
func (s *sseUsage) skipBOM(p []byte) []byte {
	for ; len(p) > 0 && s.bom >= 0; p = p[1:] {
		if p[0] != bom[s.bom] {
			s.addName(bom[:s.bom]) // not a BOM: those bytes begin the first line
			s.bom = -1
			return p
		}
		if s.bom++; s.bom == len(bom) {
			s.bom = -1
		}
	}
	return p
}

func (s *sseUsage) addName(b []byte) {
	if s.nameN < len(s.name) {
		copy(s.name[s.nameN:], b)
	}
	s.nameN += len(b)
}

func (s *sseUsage) isDataName() bool {
	return s.nameN == len(s.name) && string(s.name[:]) == "data"
}

// segment reads seg, a part of the current line.
func (s *sseUsage) segment(seg []byte) {
	if !s.named {
		i := bytes.IndexByte(seg, ':')
		if i < 0 {
			s.addName(seg)
			return
		}
		s.addName(seg[:i])
		s.named, s.space = true, true
		if s.isData = s.isDataName(); s.isData {
			s.dataLine()
		}
		seg = seg[i+1:]
	}
	if !s.isData || len(seg) == 0 {
		return
	}
	if s.space {
		s.space = false
		seg = bytes.TrimPrefix(seg, []byte(" "))
	}
	s.data.feed(seg)
}

// dataLine starts a data line's value: a newline joins it to the last.
func (s *sseUsage) dataLine() {
	if s.dataLines++; s.dataLines > 1 {
		s.data.feed([]byte("\n"))
	}
}

// endLine ends the current line.
func (s *sseUsage) endLine() {
	switch {
	case !s.named && s.nameN == 0:
		s.dispatch()
	case !s.named && s.isDataName(): // "data" alone: an empty value
		s.dataLine()
	}
	s.nameN, s.named, s.isData, s.space = 0, false, false, false
}

// dispatch ends the event being read, and reports the tokens if it had a
// usage, all of which could be read.
func (s *sseUsage) dispatch() {
	if s.found && !s.bad {
		s.got.merge(s.event)
		if n, ok := s.got.tokens(); ok {
			s.report(n)
		}
	}
	s.data.reset()
	s.event, s.found, s.bad, s.dataLines = noCounts(), false, false, 0
}
