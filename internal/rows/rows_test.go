package rows

import (
	"strings"
	"testing"
)

func TestHeadChunk(t *testing.T) {
	tests := []struct{ index, want int64 }{
		{1, 0}, {2, 0}, {999, 0}, {1000, 0},
		{1001, 1}, {2000, 1}, {2001, 2},
		{0, -1}, {-999, -1}, {-1000, -2},
		{1<<63 - 1, (1<<63 - 2) / 1000},
		{-1 << 63, -1<<63/1000 - 1},
	}
	for _, tt := range tests {
		if got := HeadChunk(tt.index); got != tt.want {
			t.Errorf("HeadChunk(%d) = %d, want %d", tt.index, got, tt.want)
		}
	}
	if HeadChunkSize != 1000 {
		t.Errorf("HeadChunkSize = %d", HeadChunkSize)
	}
}

func TestCursorIDs(t *testing.T) {
	tests := []struct{ got, want string }{
		{EventCursorID("c", 7), "1:c#7"},
		{EventCursorID("", 1), "0:#1"},
		{EventCursorID("worker-10", 1234), "9:worker-10#1234"},
		{LaneCursorID("c", "lane"), "1:cLlane"},
		{LaneCursorID("c", ""), "1:cL"},
		{LogCursorID("c", "lane"), "1:cGlane"},
		{LogCursorID("日本", "x"), "6:日本Gx"},
		{EventRow("c"), "1:c#"},
		{LaneRow("c", "lane"), "1:cLlane"},
		{RowField(5, EventRow("c"), ColAttempts), "5:1:c#:d"},
		{RowField(12, LaneRow("ab", "x:y"), ColNext), "12:2:abLx:y:next"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}

	good := []struct {
		id       string
		consumer string
		kind     byte
		rest     string
	}{
		{"1:c#7", "c", '#', "7"},
		{"0:#-3", "", '#', "-3"},
		{"3:a:b#0", "a:b", '#', "0"},
		{"2:#LL#", "#L", 'L', "#"},
		{"1:cG", "c", 'G', ""},
		{"1:cL1:dG", "c", 'L', "1:dG"},
	}
	for _, g := range good {
		c, k, r, ok := ParseCursorID(g.id)
		if !ok || c != g.consumer || k != g.kind || r != g.rest {
			t.Errorf("ParseCursorID(%q) = %q, %q, %q, %v", g.id, c, k, r, ok)
		}
	}
	for _, bad := range []string{
		"", ":", "1:", "1:c", "x:c#1", ":c#1", "01:c#1", "-1:c#1", "2:c#", "1:cX1",
		"1:c#", "1:c#01", "1:c#-0", "1:c#+1", "1:c#1a", "1:c#99999999999999999999",
		"99999999999999999999999:c#1", "5:c#1",
	} {
		if c, k, r, ok := ParseCursorID(bad); ok {
			t.Errorf("ParseCursorID(%q) = %q, %q, %q, true; want malformed", bad, c, k, r)
		}
	}
}

func TestConstants(t *testing.T) {
	cols := map[string]string{
		"ColAttempts": ColAttempts, "ColFirstClaimed": ColFirstClaimed, "ColLastClaimed": ColLastClaimed,
		"ColHolder": ColHolder, "ColExpiry": ColExpiry, "ColFailures": ColFailures,
		"ColLastFailed": ColLastFailed, "ColLastFailedAttempt": ColLastFailedAttempt, "ColError": ColError,
		"ColDeadLettered": ColDeadLettered, "ColProcessed": ColProcessed,
		"ColReturnedIDs": ColReturnedIDs, "ColKind": ColKind, "ColNext": ColNext, "ColPins": ColPins,
		"ColCancelled": ColCancelled,
	}
	want := map[string]string{
		"ColAttempts": "d", "ColFirstClaimed": "fc", "ColLastClaimed": "lc", "ColHolder": "ch",
		"ColExpiry": "ce", "ColFailures": "a", "ColLastFailed": "lf", "ColLastFailedAttempt": "lfa",
		"ColError": "e", "ColDeadLettered": "f", "ColProcessed": "p",
		"ColReturnedIDs": "ri", "ColKind": "l", "ColNext": "next", "ColPins": "pins",
		"ColCancelled": "x",
	}
	seen := map[string]string{}
	for name, v := range cols {
		if v != want[name] {
			t.Errorf("%s = %q, want %q", name, v, want[name])
		}
		if strings.Contains(v, ":") {
			t.Errorf("%s = %q contains ':'", name, v)
		}
		if other, dup := seen[v]; dup {
			t.Errorf("%s and %s share value %q", name, other, v)
		}
		seen[v] = name
	}
	if CursorHead != "h" || CursorPosition != "p" || CursorTail != "t" || CursorTypes != "ty" {
		t.Errorf("cursor suffixes = %q %q %q %q", CursorHead, CursorPosition, CursorTail, CursorTypes)
	}
}
