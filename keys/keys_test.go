package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestTag(t *testing.T) {
	big := strings.Repeat("a", 64<<10)
	bigBraces := strings.Repeat("{}", 32<<10)
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", `""`},
		{"plain", "s1", `"s1"`},
		{"NUL", "\x00", `"\u0000"`},
		{"control", "\x01\x1f", `"\u0001\u001f"`},
		{"newline", "a\nb", `"a\u000ab"`},
		{"tab", "\t", `"\u0009"`},
		{"quote", `a"b`, `"a\"b"`},
		{"backslash", `a\b`, `"a\\b"`},
		{"escaped-looking", `\u0000`, `"\\u0000"`},
		{"braces", "{x}", `"\u007bx\u007d"`},
		{"tag breakout", `s1"}:count`, `"s1\"\u007d:count"`},
		{"invalid 0xff", "\xff", `"\u00ff"`},
		{"truncated é", "\xc3", `"\u00c3"`},
		{"surrogate bytes", "\xed\xa0\x80", `"\u00ed\u00a0\u0080"`},
		{"é", "é", `"é"`},
		{"日本", "日本", `"日本"`},
		{"U+2028", "\u2028", "\"\u2028\""},
		{"U+FFFD", "\ufffd", "\"\ufffd\""},
		{"DEL", "\x7f", "\"\x7f\""},
		{"printable", " !#$%&'()*+,-./:;<=>?@[]^_`|~", "\" !#$%&'()*+,-./:;<=>?@[]^_`|~\""},
		{"64 KiB", big, `"` + big + `"`},
		{"64 KiB braces", bigBraces, `"` + strings.Repeat(`\u007b\u007d`, 32<<10) + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Tag(tt.in)
			if got != tt.want {
				if len(got) > 200 || len(tt.want) > 200 {
					t.Fatalf("Tag(%d bytes) mismatch: got %d bytes, want %d bytes", len(tt.in), len(got), len(tt.want))
				}
				t.Fatalf("Tag(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.ContainsAny(got, "{}") {
				t.Fatalf("Tag(%q) contains a brace", tt.in)
			}
			if back, ok := ParseTag(got); !ok || back != tt.in {
				t.Fatalf("ParseTag(Tag(%q)) = %q, %v", tt.in, back, ok)
			}
		})
	}
}

func TestSessionKeys(t *testing.T) {
	s := For("a2", "s1")
	tests := []struct{ got, want string }{
		{s.Base(), `a2:{"s1"}:`},
		{s.Count(), `a2:{"s1"}:count`},
		{s.Clear(), `a2:{"s1"}:clear`},
		{s.Log(), `a2:{"s1"}:log`},
		{s.ID("e1"), `a2:{"s1"}:id:e1`},
		{s.ID(""), `a2:{"s1"}:id:`},
		{s.ID("x}:{y\x00"), "a2:{\"s1\"}:id:x}:{y\x00"},
		{s.Heads(0), `a2:{"s1"}:heads:0`},
		{s.Heads(42), `a2:{"s1"}:heads:42`},
		{s.Heads(-1), `a2:{"s1"}:heads:-1`},
		{s.Cursors(), `a2:{"s1"}:cursors`},
		{s.Runnable(), `a2:{"s1"}:runnable`},
		{s.Typed(), `a2:{"s1"}:typed`},
		{s.Type("msg"), `a2:{"s1"}:type:6d7367`},
		{s.Type(""), `a2:{"s1"}:type:`},
		{s.Type("\x00\xff{"), `a2:{"s1"}:type:00ff7b`},
		{s.Pins(), `a2:{"s1"}:pins`},
		{s.Snap("r"), `a2:{"s1"}:snap:r`},
		{s.SnapHistory("r"), `a2:{"s1"}:snap-history:r`},
		{s.SnapReducers(), `a2:{"s1"}:snap-reducers`},
		{s.Presence(), `a2:{"s1"}:presence`},
		{s.Live(), `a2:{"s1"}:live`},
		{s.Sweep(), `a2:{"s1"}:sweep`},
		{s.Followed(), `a2:{"s1"}:followed`},
		{s.NotifyChannel(), `a2:{"s1"}:notify`},
		{s.PresenceChannel(), `a2:{"s1"}:presence-events`},
		{Schema("a2"), `a2:schema`},
		{For("app:v1", `a"}b`).Count(), `app:v1:{"a\"\u007db"}:count`},
		{For("a2", "é\xff").Log(), `a2:{"é\u00ff"}:log`},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
	if Layout != "a2redis-1" || SeedLayout != "tagged-1" {
		t.Errorf("Layout = %q, SeedLayout = %q", Layout, SeedLayout)
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a{b", "a}b", "{", "}"} {
		err := ValidatePrefix(p)
		if err == nil {
			t.Errorf("ValidatePrefix(%q) = nil, want error", p)
			continue
		}
		if !errors.Is(err, ErrBadPrefix) {
			t.Errorf("ValidatePrefix(%q) = %v, not ErrBadPrefix", p, err)
		}
		if p != "" && !strings.Contains(err.Error(), p) {
			t.Errorf("ValidatePrefix(%q) = %v, does not name the prefix", p, err)
		}
	}
	for _, p := range []string{"a2", "app:v1", "x", "a b*?[]"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v, want nil", p, err)
		}
	}
}

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
	}
	want := map[string]string{
		"ColAttempts": "d", "ColFirstClaimed": "fc", "ColLastClaimed": "lc", "ColHolder": "ch",
		"ColExpiry": "ce", "ColFailures": "a", "ColLastFailed": "lf", "ColLastFailedAttempt": "lfa",
		"ColError": "e", "ColDeadLettered": "f", "ColProcessed": "p",
		"ColReturnedIDs": "ri", "ColKind": "l", "ColNext": "next", "ColPins": "pins",
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
