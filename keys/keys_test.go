package keys

import (
	"errors"
	"strconv"
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
		{s.Flight(), `a2:{"s1"}:flight`},
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

// ParseClear reads the clear key's two forms: a plain index, and the
// marker of a collapsed session with its time in base 36 and its id packed
// (32 hex digits) or as it is.
func TestParseClear(t *testing.T) {
	packed := "\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef"
	for _, tc := range []struct {
		value string
		want  ClearMarker
		ok    bool
	}{
		{"0", ClearMarker{}, true},
		{"42", ClearMarker{Index: 42}, true},
		{"11:" + strconv.FormatInt(1_800_000_000_000, 36) + ":" + packed, ClearMarker{Index: 11, Collapsed: true, CreatedAt: 1_800_000_000_000, ID: "0123456789abcdef0123456789abcdef"}, true},
		{"11:1z;my:id;with:colons", ClearMarker{Index: 11, Collapsed: true, CreatedAt: 71, ID: "my:id;with:colons"}, true},
		{"11:1z;", ClearMarker{Index: 11, Collapsed: true, CreatedAt: 71}, true},
		{"", ClearMarker{}, false},
		{"x", ClearMarker{}, false},
		{"-1", ClearMarker{}, false},
		{"11:", ClearMarker{}, false},
		{"11:1z:short", ClearMarker{}, false},
		{"11:!!;id", ClearMarker{}, false},
	} {
		got, ok := ParseClear(tc.value)
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseClear(%q) = %+v, %v; want %+v, %v", tc.value, got, ok, tc.want, tc.ok)
		}
	}
}
