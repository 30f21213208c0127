package rows

import (
	"fmt"
	"strconv"
	"testing"
)

// trickyStrings seed every fuzz target.
var trickyStrings = []string{
	"", "s1", "s2", `"`, `\`, "{", "}", "{}", "}{", ":", "count", "id:", "id:x",
	`s1"}:count`, `"}:`, `a"}:{b`, "\x00", "\n", "\x1f", "\x7f", "\xff", "\xc3",
	"\xc3\xa9", "é", "日本", "\u2028", "\ufffd", "\xed\xa0\x80", `\u0000`,
	`\u007b`, `\"`, "\\\"", "schema", "type:6d7367", "heads:0", "snap:r",
	"snap-history:r", "presence-events", "1:c#7", "L", "G", "#", "s:x", "0123456789abcdef01234567",
}

// FuzzCursorID checks that cursor ids round-trip through ParseCursorID and
// that ParseCursorID accepts only the canonical ids the builders produce.
func FuzzCursorID(f *testing.F) {
	for i, s := range trickyStrings {
		f.Add(s, trickyStrings[(i+5)%len(trickyStrings)], int64(i)-3, s)
	}
	f.Add("c", "lane", int64(1<<63-1), "1:c#01")
	f.Add("1:c#", "1:cL", int64(-1<<63), "3:abLx")
	f.Fuzz(func(t *testing.T, consumer, lane string, index int64, raw string) {
		check := func(id string, wantKind byte, wantRest string) {
			t.Helper()
			c, k, r, ok := ParseCursorID(id)
			if !ok || c != consumer || k != wantKind || r != wantRest {
				t.Fatalf("ParseCursorID(%q) = %q, %q, %q, %v; want %q, %q, %q",
					id, c, k, r, ok, consumer, wantKind, wantRest)
			}
		}
		check(EventCursorID(consumer, index), '#', strconv.FormatInt(index, 10))
		check(LaneCursorID(consumer, lane), 'L', lane)
		check(LogCursorID(consumer, lane), 'G', lane)
		if LaneCursorID(consumer, lane) != LaneRow(consumer, lane) {
			t.Fatalf("LaneRow(%q, %q) differs from the lane cursor id", consumer, lane)
		}
		if EventRow(consumer) != EventCursorID(consumer, 0)[:len(EventCursorID(consumer, 0))-1] {
			t.Fatalf("EventRow(%q) is not the event cursor id without its index", consumer)
		}

		// Any accepted id is exactly what a builder produces.
		c, k, r, ok := ParseCursorID(raw)
		if !ok {
			return
		}
		var rebuilt string
		switch k {
		case '#':
			i, err := strconv.ParseInt(r, 10, 64)
			if err != nil {
				t.Fatalf("ParseCursorID(%q) accepted index %q", raw, r)
			}
			rebuilt = EventCursorID(c, i)
		case 'L':
			rebuilt = LaneCursorID(c, r)
		case 'G':
			rebuilt = LogCursorID(c, r)
		default:
			t.Fatalf("ParseCursorID(%q) returned kind %q", raw, k)
		}
		if rebuilt != raw {
			t.Fatalf("ParseCursorID(%q) = %q, %q, %q; rebuilds as %q", raw, c, k, r, rebuilt)
		}
	})
}

var allColumns = []string{
	ColAttempts, ColFirstClaimed, ColLastClaimed, ColHolder, ColExpiry, ColFailures,
	ColLastFailed, ColLastFailedAttempt, ColError, ColDeadLettered, ColProcessed,
	ColReturnedIDs, ColKind, ColNext, ColPins, ColCancelled,
}

// rowOf builds a head row from fuzz input: an event row, a lane row or (to
// show RowField is injective for any row string) the raw string.
func rowOf(kind uint8, consumer, lane string) (row, input string) {
	switch kind % 3 {
	case 0:
		return EventRow(consumer), "event\x00" + consumer
	case 1:
		return LaneRow(consumer, lane), fmt.Sprintf("lane\x00%d\x00%s\x00%s", len(consumer), consumer, lane)
	default:
		return consumer, "raw\x00" + consumer
	}
}

// FuzzRowField checks that head rows and row fields are injective.
func FuzzRowField(f *testing.F) {
	for i, s := range trickyStrings {
		o := trickyStrings[(i+9)%len(trickyStrings)]
		f.Add(int64(i), uint8(i), s, o, uint8(i), int64(i), uint8(i+1), s, o, uint8(i+1))
	}
	f.Add(int64(1), uint8(1), "c", "x:p", uint8(0), int64(1), uint8(1), "c", "x", uint8(10))  // lane containing ":p"
	f.Add(int64(1), uint8(2), "1:c#:1", "", uint8(0), int64(1), uint8(0), "c", "", uint8(0))  // raw row vs index
	f.Add(int64(12), uint8(0), "c", "", uint8(0), int64(1), uint8(2), "2:1:c#", "", uint8(0)) // index digits move
	f.Add(int64(1), uint8(0), "cL", "", uint8(0), int64(1), uint8(1), "c", "", uint8(0))      // "2:cL#" vs "1:cL"
	f.Fuzz(func(t *testing.T, i1 int64, rk1 uint8, c1, l1 string, col1 uint8, i2 int64, rk2 uint8, c2, l2 string, col2 uint8) {
		r1, in1 := rowOf(rk1, c1, l1)
		r2, in2 := rowOf(rk2, c2, l2)
		// Rows built by EventRow/LaneRow are injective among themselves.
		if rk1%3 != 2 && rk2%3 != 2 && (in1 == in2) != (r1 == r2) {
			t.Fatalf("rows %q (%q) and %q (%q): inputs equal=%v", r1, in1, r2, in2, in1 == in2)
		}
		k1, k2 := allColumns[int(col1)%len(allColumns)], allColumns[int(col2)%len(allColumns)]
		f1, f2 := RowField(i1, r1, k1), RowField(i2, r2, k2)
		same := i1 == i2 && r1 == r2 && k1 == k2
		if same != (f1 == f2) {
			t.Fatalf("RowField(%d,%q,%q)=%q vs RowField(%d,%q,%q)=%q: inputs equal=%v",
				i1, r1, k1, f1, i2, r2, k2, f2, same)
		}
	})
}
