package httppolicy

import (
	"errors"
	"fmt"
	"io"
)

// StreamEnd is the event that ends a whole event stream: an event whose
// type is Event (if set) and whose data is Data (if set). A stream that
// ends without it was cut. The zero StreamEnd is invalid.
type StreamEnd struct {
	Event string // such as "message_stop"; at most 64 bytes
	Data  string // such as "[DONE]"; at most 64 bytes
}

// The terminal events of the OpenAI and Anthropic streaming APIs. Take
// their addresses for [Transport.StreamEnd]; do not modify them.
var (
	OpenAIStreamEnd    = StreamEnd{Data: "[DONE]"}
	AnthropicStreamEnd = StreamEnd{Event: "message_stop"}
)

// ErrStreamCut ends the last Read of an event stream that reached its end
// without its [Transport.StreamEnd] event. It matches io.ErrUnexpectedEOF.
var ErrStreamCut = fmt.Errorf("httppolicy: event stream ended without its terminal event: %w", io.ErrUnexpectedEOF)

// maxEndField bounds StreamEnd's fields, so that the scanner matches them
// from the bytes of a line it keeps.
const maxEndField = maxEventName

// check returns why e is no valid Transport.StreamEnd, or nil.
func (e *StreamEnd) check() error {
	switch {
	case e == nil:
		return nil
	case e.Event == "" && e.Data == "":
		return errors.New("httppolicy: Transport.StreamEnd is empty: set Event, Data or both")
	case len(e.Event) > maxEndField || len(e.Data) > maxEndField:
		return fmt.Errorf("httppolicy: Transport.StreamEnd fields must be at most %d bytes", maxEndField)
	}
	return nil
}
