package redisstore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
)

// Script replies are flat tuples of bulk strings, integers, nils and nested
// arrays. These helpers read them; each script's reply is decoded by exactly
// one function next to the operation that runs it.

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// word returns reply[i] as text ("" when absent or nil).
func word(reply []rueidis.RedisMessage, i int) string {
	if i >= len(reply) {
		return ""
	}
	return text(reply[i])
}

func text(m rueidis.RedisMessage) string {
	if m.IsNil() {
		return ""
	}
	if m.IsInt64() {
		n, _ := m.AsInt64()
		return itoa(n)
	}
	s, _ := m.ToString()
	return s
}

// number returns reply[i] as an integer.
func number(reply []rueidis.RedisMessage, i int) (int64, error) {
	if i >= len(reply) {
		return 0, fmt.Errorf("%w: reply too short (%d items)", a2redis.ErrUnexpectedReply, len(reply))
	}
	return asInt(reply[i])
}

func asInt(m rueidis.RedisMessage) (int64, error) {
	if m.IsInt64() {
		return m.AsInt64()
	}
	s, err := m.ToString()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", a2redis.ErrUnexpectedReply, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an integer", a2redis.ErrUnexpectedReply, s)
	}
	return n, nil
}

func array(m rueidis.RedisMessage) []rueidis.RedisMessage {
	if !m.IsArray() {
		return nil
	}
	v, _ := m.ToArray()
	return v
}

// entry decodes a stream entry { id, { field, value, ... } } of a session.
func entry(session string, m rueidis.RedisMessage) (a2redis.StoredEvent, error) {
	parts := array(m)
	if len(parts) != 2 {
		return a2redis.StoredEvent{}, fmt.Errorf("%w: stream entry %v", a2redis.ErrUnexpectedReply, m)
	}
	id := text(parts[0])
	fields := array(parts[1])
	values := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		values[text(fields[i])] = text(fields[i+1])
	}
	return toEvent(session, id, values)
}

// toEvent builds a stored event from a stream entry's id and fields.
func toEvent(session, id string, fields map[string]string) (a2redis.StoredEvent, error) {
	index, err := entryIndex(id)
	if err != nil {
		return a2redis.StoredEvent{}, err
	}
	ev := a2redis.StoredEvent{
		Session: session,
		Index:   index,
		ID:      fields["id"],
		Type:    fields["type"],
		Payload: json.RawMessage(fields["payload"]),
		Trace:   fields["trace"],
	}
	if at, err := strconv.ParseInt(fields["created_at"], 10, 64); err == nil {
		ev.CreatedAt = time.UnixMilli(at)
	}
	if at, err := strconv.ParseInt(fields["not_before"], 10, 64); err == nil && at > 0 {
		ev.NotBefore = time.UnixMilli(at)
	}
	if raw := fields["cause"]; raw != "" {
		var c a2redis.Cause
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			return a2redis.StoredEvent{}, fmt.Errorf("%w: event %d has an invalid cause %q", a2redis.ErrUnexpectedReply, index, raw)
		}
		ev.Cause = &c
	}
	return ev, nil
}

func entryIndex(id string) (int64, error) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: stream id %q", a2redis.ErrUnexpectedReply, id)
	}
	return n, nil
}

// headState decodes a head row's columns d fc lc ch ce a lf lfa e f.
func headState(m rueidis.RedisMessage) a2redis.HeadState {
	cols := array(m)
	col := func(i int) string {
		if i < len(cols) {
			return text(cols[i])
		}
		return ""
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(col(i), 10, 64)
		return n
	}
	at := func(i int) time.Time {
		if col(i) == "" {
			return time.Time{}
		}
		return time.UnixMilli(num(i))
	}
	return a2redis.HeadState{
		Attempts:          num(0),
		FirstClaimedAt:    at(1),
		LastClaimedAt:     at(2),
		Holder:            col(3),
		ClaimExpiresAt:    at(4),
		Failures:          num(5),
		LastFailedAt:      at(6),
		LastFailedAttempt: num(7),
		LastError:         col(8),
		DeadLetteredAt:    at(9),
	}
}

// cursorOf reads a cursor tag ('#...', 'L<lane>', 'G<lane>') as kind and lane.
func cursorOf(tag string) (a2redis.CursorKind, string) {
	if tag == "" {
		return a2redis.EventCursor, ""
	}
	switch tag[0] {
	case 'L':
		return a2redis.LaneCursor, tag[1:]
	case 'G':
		return a2redis.LogCursor, tag[1:]
	default:
		return a2redis.EventCursor, ""
	}
}

// tagOf is how scripts name a cursor of a request: '#' or 'L<lane>'.
func tagOf(lane string) string {
	if lane == "" {
		return "#"
	}
	return "L" + lane
}
