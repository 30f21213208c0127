// Package rows is the layout inside a session's heads hash and cursors
// hash (keys.Session.Heads, keys.Session.Cursors): the chunks the heads
// are spread over, the fields of a head row and their columns, and the
// cursor ids. Go and the scripts share these names through the generated
// lua/include/layout.lua; nothing outside the module needs them.
package rows

import (
	"strconv"
	"strings"
)

// HeadChunkSize is how many consecutive indexes share one heads:<chunk>
// hash; index i (1-based) lives in chunk (i-1)/HeadChunkSize.
const HeadChunkSize = 1000

// HeadChunk returns the chunk of the heads hash (keys.Session.Heads) holding
// the rows of index. Indexes are 1-based: indexes 1..1000 are chunk 0,
// 1001..2000 chunk 1, and so on. The division rounds down, so an index below
// 1 maps to a negative chunk rather than sharing chunk 0.
func HeadChunk(index int64) int64 {
	if index >= 1 {
		return (index - 1) / HeadChunkSize
	}
	// index <= 0: Go's division truncates toward zero, so index = q*K + r
	// with r in (-K, 0], and floor((index-1)/K) = q-1. No overflow.
	return index/HeadChunkSize - 1
}

// ChunkPin is a field every heads hash carries besides its rows, set to
// [ChunkPinValue] by every write to the hash. The value is longer than
// Redis's default hash-max-listpack-value (64 bytes), which keeps the hash
// in hashtable encoding: a chunk holds hundreds of fields, and in a listpack
// every field read or write scans the whole hash. The rebuild of a settled
// session (compact_log) removes it: a chunk nothing writes costs less as a
// listpack.
const ChunkPin = "~"

// ChunkPinFrom is the session head (events appended in all) from which
// writes to a heads hash set its pin: a session with fewer events keeps
// its few rows in a small listpack (Redis converts one past
// hash-max-listpack-entries by itself), which the rebuild at settle then
// leaves as it is — a small session is never pinned, so never rebuilt.
const ChunkPinFrom = 8

// ChunkPinValue is the value of [ChunkPin].
const ChunkPinValue = "hashtable-encoding-pin-hashtable-encoding-pin-hashtable-encoding-pin"

// Columns of a head row. A head row is a group of fields of a heads hash,
// one per column, named by [RowField].
const (
	// ColAttempts is the number of times the row's event was claimed.
	ColAttempts = "d"
	// ColFirstClaimed is the time of the first claim.
	ColFirstClaimed = "fc"
	// ColLastClaimed is the time of the latest claim.
	ColLastClaimed = "lc"
	// ColHolder is the holder of the current claim.
	ColHolder = "ch"
	// ColExpiry is the expiry time of the current claim.
	ColExpiry = "ce"
	// ColFailures is the number of failed attempts.
	ColFailures = "a"
	// ColLastFailed is the time of the latest failure.
	ColLastFailed = "lf"
	// ColLastFailedAttempt is the attempt number of the latest failure.
	ColLastFailedAttempt = "lfa"
	// ColError is the error message of the latest failure.
	ColError = "e"
	// ColDeadLettered marks the event as dead-lettered (failed for good).
	ColDeadLettered = "f"
	// ColProcessed marks a head the cursor moved past: "<processed at
	// ms>:<attempt>" (attempt 0 when it was skipped). A completed row keeps
	// only this column, its returned ids and, for lane and log rows, its
	// kind.
	ColProcessed = "p"
	// ColReturnedIDs holds the event ids returned by the processing.
	ColReturnedIDs = "ri"
	// ColKind is the kind of the row (event, lane or log cursor).
	ColKind = "l"
	// ColNext is the next index the row's cursor moves to.
	ColNext = "next"
	// ColPins is the pins the row holds.
	ColPins = "pins"
	// ColCancelled marks a head cancelled before it completed (Store.Cancel):
	// its cancel time (ms). The row is processed with attempt 0 too.
	ColCancelled = "x"
)

// Suffixes of the fields of one cursor record in the cursors hash
// (keys.Session.Cursors).
const (
	// CursorHead is the suffix of the cursor's head index.
	CursorHead = "h"
	// CursorPosition is the suffix of the cursor's current position.
	CursorPosition = "p"
	// CursorTail is the suffix of the cursor's tail index.
	CursorTail = "t"
	// CursorTypes is the suffix of the event types the cursor follows.
	CursorTypes = "ty"
)

// Cursor kinds, the byte after the consumer in a cursor id.
const (
	kindEvent = '#'
	kindLane  = 'L'
	kindLog   = 'G'
)

func lenPrefixed(consumer string, kind byte, rest string) string {
	n := strconv.Itoa(len(consumer))
	var b strings.Builder
	b.Grow(len(n) + 1 + len(consumer) + 1 + len(rest))
	b.WriteString(n)
	b.WriteByte(':')
	b.WriteString(consumer)
	b.WriteByte(kind)
	b.WriteString(rest)
	return b.String()
}

// EventCursorID is the cursor id of consumer's cursor on one event:
// "<len>:<consumer>#<index>", where <len> is the decimal byte length of
// consumer.
func EventCursorID(consumer string, index int64) string {
	return lenPrefixed(consumer, kindEvent, strconv.FormatInt(index, 10))
}

// LaneCursorID is the cursor id of consumer's cursor on a lane:
// "<len>:<consumer>L<lane>".
func LaneCursorID(consumer, lane string) string {
	return lenPrefixed(consumer, kindLane, lane)
}

// LogCursorID is the cursor id of consumer's cursor following the log of a
// lane: "<len>:<consumer>G<lane>".
func LogCursorID(consumer, lane string) string {
	return lenPrefixed(consumer, kindLog, lane)
}

// ParseCursorID splits a cursor id back into consumer, kind ('#', 'L' or
// 'G') and the rest of the tag: the index digits for '#', the lane
// otherwise. ok is false when id is malformed, in particular when it is not
// exactly what EventCursorID, LaneCursorID or LogCursorID would produce (a
// non-canonical length or index, such as a leading zero, is malformed).
func ParseCursorID(id string) (consumer string, kind byte, rest string, ok bool) {
	colon := strings.IndexByte(id, ':')
	if colon <= 0 {
		return "", 0, "", false
	}
	digits := id[:colon]
	if len(digits) > 1 && digits[0] == '0' {
		return "", 0, "", false
	}
	n := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return "", 0, "", false
		}
		if n > len(id) { // already longer than any possible consumer
			return "", 0, "", false
		}
		n = n*10 + int(c-'0')
	}
	start := colon + 1
	if n > len(id)-start-1 { // consumer plus the kind byte must fit
		return "", 0, "", false
	}
	consumer = id[start : start+n]
	kind = id[start+n]
	rest = id[start+n+1:]
	switch kind {
	case kindEvent:
		v, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || strconv.FormatInt(v, 10) != rest {
			return "", 0, "", false
		}
	case kindLane, kindLog:
	default:
		return "", 0, "", false
	}
	return consumer, kind, rest, true
}

// EventRow is the head-row name of consumer's event cursors:
// "<len>:<consumer>#".
func EventRow(consumer string) string {
	return lenPrefixed(consumer, kindEvent, "")
}

// LaneRow is the head-row name of consumer's lane and log cursors on lane:
// "<len>:<consumer>L<lane>".
func LaneRow(consumer, lane string) string {
	return lenPrefixed(consumer, kindLane, lane)
}

// RowField is the heads-hash field of one column of a head row:
// "<index>:<row>:<column>". column is one of the Col* constants; since none
// of them contains ':', the field splits uniquely at its first and last ':'.
func RowField(index int64, row, column string) string {
	idx := strconv.FormatInt(index, 10)
	var b strings.Builder
	b.Grow(len(idx) + 1 + len(row) + 1 + len(column))
	b.WriteString(idx)
	b.WriteByte(':')
	b.WriteString(row)
	b.WriteByte(':')
	b.WriteString(column)
	return b.String()
}
