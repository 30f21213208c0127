// Package wire is the codec of a2redis wake-ups: what a store publishes
// and what package notify's feed decodes. It is internal: only the
// module's own packages write or read the wire format.
//
// A wake-up is published after a write commits, on the session's notify
// channel (keys.Session.NotifyChannel):
//
//	{"f":frontier,"t":createdAt,"e":[[index,id,type,payload],...]}
//
// It carries the new events (payloads inlined verbatim as their stored JSON)
// so a caught-up reader applies them without reading the stream. A batch
// over MaxCarried bytes, or one that cannot be carried faithfully, is
// announced bare, as {"f":frontier}, and readers catch up with XRANGE.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxCarried is the largest wake-up, in bytes, that carries its events.
const MaxCarried = 32 * 1024

// Entry is one event a wake-up carries.
type Entry struct {
	// Index is the event's index.
	Index int64
	// ID is the event id.
	ID string
	// Type is the event type.
	Type string
	// Payload is the stored JSON payload, verbatim.
	Payload json.RawMessage
}

// Message is a decoded wake-up.
type Message struct {
	// Frontier is the session head after the write.
	Frontier int64
	// CreatedAt is the events' creation time, epoch milliseconds (0 when
	// bare).
	CreatedAt int64
	// Entries are the carried events, in index order; nil when bare.
	Entries []Entry
	// Bare reports a message without events: catch up by reading.
	Bare bool
}

// Encode builds a wake-up announcing events through frontier. It carries
// entries unless the message would exceed MaxCarried bytes or an id or type
// is not valid UTF-8 (JSON could not carry it faithfully); then it is bare.
func Encode(frontier, createdAt int64, entries []Entry) []byte {
	bare := EncodeBare(frontier)
	if len(entries) == 0 {
		return bare
	}
	buf := make([]byte, 0, 64+len(entries)*64)
	buf = append(buf, `{"f":`...)
	buf = strconv.AppendInt(buf, frontier, 10)
	buf = append(buf, `,"t":`...)
	buf = strconv.AppendInt(buf, createdAt, 10)
	buf = append(buf, `,"e":[`...)
	for i, e := range entries {
		if !utf8.ValidString(e.ID) || !utf8.ValidString(e.Type) {
			return bare
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		buf = strconv.AppendInt(buf, e.Index, 10)
		buf = append(buf, ',')
		buf = appendString(buf, e.ID)
		buf = append(buf, ',')
		buf = appendString(buf, e.Type)
		buf = append(buf, ',')
		if len(e.Payload) == 0 {
			buf = append(buf, "null"...)
		} else {
			buf = append(buf, e.Payload...)
		}
		buf = append(buf, ']')
		if len(buf) > MaxCarried {
			return bare
		}
	}
	buf = append(buf, "]}"...)
	if len(buf) > MaxCarried {
		return bare
	}
	return buf
}

// EncodeBare builds a wake-up that announces only the frontier.
func EncodeBare(frontier int64) []byte {
	buf := append([]byte(`{"f":`), strconv.FormatInt(frontier, 10)...)
	return append(buf, '}')
}

// appendString appends s, valid UTF-8, as a JSON string.
func appendString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		default:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// ErrMalformed reports a wake-up that is not one this package encodes.
var ErrMalformed = errors.New("wire: malformed wake-up")

type wire struct {
	F *int64            `json:"f"`
	T int64             `json:"t"`
	E []json.RawMessage `json:"e"`
}

// Decode parses a wake-up. Payloads are kept verbatim.
func Decode(data []byte) (Message, error) {
	var w wire
	if err := json.Unmarshal(data, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.F == nil {
		return Message{}, fmt.Errorf("%w: no frontier", ErrMalformed)
	}
	m := Message{Frontier: *w.F, CreatedAt: w.T, Bare: w.E == nil}
	if m.Bare {
		return m, nil
	}
	m.Entries = make([]Entry, 0, len(w.E))
	for _, raw := range w.E {
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil || len(parts) != 4 {
			return Message{}, fmt.Errorf("%w: entry %s", ErrMalformed, raw)
		}
		var e Entry
		if err := json.Unmarshal(parts[0], &e.Index); err != nil {
			return Message{}, fmt.Errorf("%w: entry index: %v", ErrMalformed, err)
		}
		if err := json.Unmarshal(parts[1], &e.ID); err != nil {
			return Message{}, fmt.Errorf("%w: entry id: %v", ErrMalformed, err)
		}
		if err := json.Unmarshal(parts[2], &e.Type); err != nil {
			return Message{}, fmt.Errorf("%w: entry type: %v", ErrMalformed, err)
		}
		e.Payload = append(json.RawMessage(nil), parts[3]...)
		m.Entries = append(m.Entries, e)
	}
	return m, nil
}
