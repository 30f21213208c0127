package keys

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Layout is the layout name this package writes; it is stored under
// [Schema] of the prefix.
const Layout = "a2redis-1"

// SeedLayout is the layout of the TypeScript seed package (a2 0.22) and of
// early builds of this module; a prefix holding it is refused.
const SeedLayout = "tagged-1"

// ErrBadPrefix is wrapped by the error [ValidatePrefix] returns for a prefix
// that cannot be used.
var ErrBadPrefix = errors.New("keys: invalid key prefix")

// ValidatePrefix reports whether prefix can be used as a key prefix. The
// prefix must not be empty and must not contain '{' or '}', since a brace
// would set (or break) the hash tag of every key. The returned error wraps
// [ErrBadPrefix].
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: %q: prefix is empty", ErrBadPrefix, prefix)
	}
	if i := strings.IndexAny(prefix, "{}"); i >= 0 {
		return fmt.Errorf("%w: %q: prefix contains %q at byte %d; braces would change the hash tag of every key",
			ErrBadPrefix, prefix, prefix[i], i)
	}
	return nil
}

// Schema is the global key recording the layout of the keys under prefix:
// prefix+":schema", a string holding [Layout].
func Schema(prefix string) string {
	return prefix + ":schema"
}

const hexDigits = "0123456789abcdef"

// Tag returns the quoted session id used inside the hash tag (without
// braces): the id as a JSON string literal, surrounding double quotes
// included. '"' and '\' are backslash-escaped; bytes 0x00–0x1F, '{', '}' and
// every byte that is not part of a valid UTF-8 sequence are written as
// \u00XX (lower-case hex); valid UTF-8 and the other printable ASCII bytes
// are copied unchanged. The quoting is injective and the result never
// contains '{' or '}'.
func Tag(session string) string {
	var b strings.Builder
	b.Grow(len(session) + 2)
	b.WriteByte('"')
	for i := 0; i < len(session); {
		c := session[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20 || c == '{' || c == '}':
				writeU00(&b, c)
			default:
				b.WriteByte(c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(session[i:])
		if r == utf8.RuneError && size == 1 {
			writeU00(&b, c)
		} else {
			b.WriteString(session[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

func writeU00(b *strings.Builder, c byte) {
	b.WriteString(`\u00`)
	b.WriteByte(hexDigits[c>>4])
	b.WriteByte(hexDigits[c&0x0f])
}

// Session names every key and channel of one session. Build it with [For];
// the zero value is unusable (it would name keys without prefix and tag).
type Session struct {
	base string // prefix + ":{" + Tag(session) + "}:"
}

// For returns the key namer of session under prefix. It does not validate
// the prefix: the store checks it once with [ValidatePrefix] when it is
// created, and every key built from an invalid prefix may land in the wrong
// hash slot.
func For(prefix, session string) Session {
	return Session{base: prefix + ":{" + Tag(session) + "}:"}
}

// Base returns "<prefix>:{<tag>}:", the common prefix of every key and
// channel of the session. When used as a SCAN MATCH pattern, the caller must
// escape glob characters ('*', '?', '[', ']', '\') it may contain.
func (s Session) Base() string { return s.base }

// Count is the string key holding the session's head index.
func (s Session) Count() string { return s.base + "count" }

// Sentinel is a key of the session's slot that is never written. Every
// script over the session declares it after the counter (KEYS[2]): while the
// slot migrates between cluster nodes, Redis refuses a script that declares
// a key missing on the node (TRYAGAIN, or ASK and then TRYAGAIN on the
// importing node), so no script runs, and none can stop half-way at a key
// that has already moved or read a key not yet moved as empty. Outside a
// migration a missing declared key changes nothing.
func (s Session) Sentinel() string { return s.base + "sentinel" }

// Clear is the string key holding the index of the latest clear marker;
// once the session collapsed to the marker, the marker itself (see
// ParseClear).
func (s Session) Clear() string { return s.base + "clear" }

// Log is the stream key holding the events of the session.
func (s Session) Log() string { return s.base + "log" }

// ID is the key recording the event with id eventID; the raw bytes of the
// id form the last segment of the key.
func (s Session) ID(eventID string) string { return s.base + "id:" + eventID }

// IDBlock is the key recording a batch of two or more events whose ids the
// store generated: every id of such a batch is nonce followed by the
// event's position in the batch as 8 lower-case hex digits, and the key
// holds "<first index>:<count>" (a generated batch of one has its ID key
// instead). An id of that shape is owned by its own ID key when there is
// one, else by its block.
func (s Session) IDBlock(nonce string) string { return s.base + "ids:" + nonce }

// Heads is the hash key holding the head rows of the indexes of one chunk:
// index i (1-based) is in chunk (i-1)/1000. The rows' fields are laid out
// by the module's internal/rows package. A settled session's chunks are
// rebuilt without their pin field (a listpack, the rows kept); the next
// write to one pins it again.
func (s Session) Heads(chunk int64) string {
	return s.base + "heads:" + strconv.FormatInt(chunk, 10)
}

// Cursors is the hash key holding the cursor records of the session, keyed
// by cursor id.
func (s Session) Cursors() string { return s.base + "cursors" }

// Runnable is the zset of every cursor with a head, scored by the head's
// index while it is free to claim, HeldOffset + the time (epoch ms) its
// claim lapses or its retry hold ends while it is held, and minus its index
// while it is dead-lettered.
func (s Session) Runnable() string { return s.base + "runnable" }

// Floor is the string key holding the highest index trimmed from the
// session's log (Store.Trim): the retained log starts right after it. It
// exists only in a session that was trimmed.
func (s Session) Floor() string { return s.base + "floor" }

// Skip is the string key of the session's scan marks, a JSON object
// consumer → score: the consumer has no head free to claim scored below its
// mark. A claim serving some consumers starts its walk of the free heads at
// the lowest mark among them instead of the first free head, so the free
// heads of consumers it does not serve that lie below are not walked again
// (a claim records a mark once its walk passed many heads, and raises it as
// it walks on). Every write that frees a head below its consumer's mark
// lowers the mark (appends add heads above every mark); a consumer without
// a mark is walked from the first free head. The key exists only in a
// session such walks crossed.
func (s Session) Skip() string { return s.base + "skip" }

// HeldOffset marks held heads in the runnable set: a scan of the scores
// 1 … HeldOffset-1 finds exactly the heads free to claim, and the held ones
// sort by when they free up.
const HeldOffset = 1 << 50

// Typed is the key recording which event types occur in the session.
func (s Session) Typed() string { return s.base + "typed" }

// Type is the key indexing the events of one type; the type is written as
// the lower-case hex of its bytes, so it cannot spell any other name.
func (s Session) Type(eventType string) string {
	const p = "type:"
	buf := make([]byte, 0, len(s.base)+len(p)+2*len(eventType))
	buf = append(buf, s.base...)
	buf = append(buf, p...)
	for i := 0; i < len(eventType); i++ {
		c := eventType[i]
		buf = append(buf, hexDigits[c>>4], hexDigits[c&0x0f])
	}
	return string(buf)
}

// Pins is the key of the pinned indexes that must not be trimmed.
func (s Session) Pins() string { return s.base + "pins" }

// Snap is the key of the latest snapshot of reducer; the reducer name is the
// last segment of the key.
func (s Session) Snap(reducer string) string { return s.base + "snap:" + reducer }

// SnapHistory is the key of the older snapshots of reducer; the reducer name
// is the last segment of the key.
func (s Session) SnapHistory(reducer string) string {
	return s.base + "snap-history:" + reducer
}

// SnapReducers is the key of the set of reducer names that have a snapshot.
func (s Session) SnapReducers() string { return s.base + "snap-reducers" }

// Presence is the key of the members present in the session.
func (s Session) Presence() string { return s.base + "presence" }

// Live is the string key holding the number of live runnable heads; no
// key reads as 0 (a clear deletes it, and so does the rebuild of a settled
// session).
func (s Session) Live() string { return s.base + "live" }

// Flight is the hash of the session's heads in flight per consumer:
// consumer name → how many of its heads hold a claim (the holder named,
// the attempt not finished; a lapsed claim counts until it is taken over,
// released or dead-lettered). Every script that names or clears a head's
// holder keeps it; a field at zero is deleted, so the key exists only
// while something is in flight. Claims read it to keep a consumer's
// a2redis.Consumer.PerSession limit.
func (s Session) Flight() string { return s.base + "flight" }

// Sweep is the string key saying how far the sweep of a past lifetime got,
// "<clear index>:<phase>:<cursor>"; it exists only while a reclaim's sweep
// is due or under way.
func (s Session) Sweep() string { return s.base + "sweep" }

// SweepDrop is the set of reducer names a sweep found left with nothing, on
// their way out of [Session.SnapReducers]; it exists only during a sweep.
func (s Session) SweepDrop() string { return s.base + "sweep-drop" }

// Followed is the string key that marks the session as followed: readers
// of its notify channel (notify.Feed, notify.SessionWatcher) set it, with
// an expiry (PX), before they subscribe and refresh it while they follow.
// Plain appends publish their wake-ups only while it exists; a reader that
// finds it had lapsed reads what it may have missed. Its value means
// nothing.
func (s Session) Followed() string { return s.base + "followed" }

// NotifyChannel is the pub/sub channel (not a key) announcing new work in
// the session. It carries the session's hash tag so that sharded pub/sub
// routes it to the session's slot.
func (s Session) NotifyChannel() string { return s.base + "notify" }

// PresenceChannel is the pub/sub channel (not a key) announcing presence
// changes of the session. It carries the session's hash tag.
func (s Session) PresenceChannel() string { return s.base + "presence-events" }

// ParseTag strictly inverts Tag: it returns the session id a tag quotes,
// and false for any text Tag never produces. (ParseTag(Tag(s)) == s for
// every s is also what proves Tag injective.)
func ParseTag(t string) (string, bool) {
	if len(t) < 2 || t[0] != '"' || t[len(t)-1] != '"' {
		return "", false
	}
	t = t[1 : len(t)-1]
	var b strings.Builder
	for i := 0; i < len(t); {
		c := t[i]
		switch {
		case c == '"' || c == '{' || c == '}' || c < 0x20:
			return "", false
		case c == '\\':
			if i+1 >= len(t) {
				return "", false
			}
			switch t[i+1] {
			case '"', '\\':
				b.WriteByte(t[i+1])
				i += 2
			case 'u':
				if i+6 > len(t) || t[i+2:i+4] != "00" {
					return "", false
				}
				v, err := strconv.ParseUint(t[i+4:i+6], 16, 8)
				if err != nil || strings.ToLower(t[i+4:i+6]) != t[i+4:i+6] {
					return "", false
				}
				if !(v < 0x20 || v == '{' || v == '}' || v >= 0x80) {
					return "", false
				}
				b.WriteByte(byte(v))
				i += 6
			default:
				return "", false
			}
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(t[i:])
			if r == utf8.RuneError && size == 1 {
				return "", false // raw invalid bytes are always escaped
			}
			b.WriteString(t[i : i+size])
			i += size
		}
	}
	return b.String(), true
}

// SessionOfLogKey returns the session whose log key is key under prefix,
// and false when key is not exactly such a key (for SCAN results).
func SessionOfLogKey(prefix, key string) (string, bool) {
	return sessionOfKey(prefix, key, Session.Log)
}

// SessionOfClearKey returns the session whose clear key is key under
// prefix, and false when key is not exactly such a key (for SCAN results:
// an ended session keeps its clear key alone, no log).
func SessionOfClearKey(prefix, key string) (string, bool) {
	return sessionOfKey(prefix, key, Session.Clear)
}

// SessionScanTail is what a SCAN MATCH pattern for a session's log or
// clear key puts after the session's tag and its ':' ("log" and "clear",
// and a few others, which SessionOfLogKey and SessionOfClearKey refuse).
// Every session with any state has one of the two.
const SessionScanTail = "[lc][ol][ge]*"

// ClearMarker is what the clear key of a session says of its latest clear
// marker: its index always; once the session collapsed to the marker (an
// ended lifetime, its log gone) also the marker's creation time and id,
// the fields of its log entry that are not fixed.
type ClearMarker struct {
	// Index is the marker's index.
	Index int64
	// Collapsed is true when the key holds the marker itself.
	Collapsed bool
	// CreatedAt is the marker's creation time (epoch ms), when Collapsed.
	CreatedAt int64
	// ID is the marker's event id, when Collapsed.
	ID string
}

// ParseClear reads a clear key's value: '<index>', or, for a collapsed
// session, '<index>:<created at in base 36>' followed by ':' and the 16
// bytes of an id of 32 lower-case hex digits (the store's own ids) or by
// ';' and any other id (lua/include/sweep.lua writes it; the scripts'
// util.clear_index reads the index alone).
func ParseClear(value string) (ClearMarker, bool) {
	idx, rest, collapsed := strings.Cut(value, ":")
	n, err := strconv.ParseInt(idx, 10, 64)
	if err != nil || n < 0 {
		return ClearMarker{}, false
	}
	m := ClearMarker{Index: n}
	if !collapsed {
		return m, true
	}
	cut := strings.IndexAny(rest, ":;")
	if cut < 0 {
		return ClearMarker{}, false
	}
	if m.CreatedAt, err = strconv.ParseInt(rest[:cut], 36, 64); err != nil {
		return ClearMarker{}, false
	}
	m.Collapsed, m.ID = true, rest[cut+1:]
	if rest[cut] == ':' {
		if len(m.ID) != 16 {
			return ClearMarker{}, false
		}
		m.ID = hex.EncodeToString([]byte(m.ID))
	}
	return m, true
}

func sessionOfKey(prefix, key string, name func(Session) string) (string, bool) {
	head := prefix + ":{"
	if !strings.HasPrefix(key, head) {
		return "", false
	}
	end := strings.IndexByte(key[len(head):], '}')
	if end < 0 {
		return "", false
	}
	session, ok := ParseTag(key[len(head) : len(head)+end])
	if !ok || name(For(prefix, session)) != key {
		return "", false
	}
	return session, true
}

// EscapeGlob escapes the characters SCAN MATCH gives a meaning to ('*',
// '?', '[', ']', '\'), so that the result, used as a pattern, matches only
// s itself: for building a SCAN pattern from a prefix or a [Session.Base].
func EscapeGlob(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
