package a2redis_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

var update = flag.Bool("update", false, "rewrite lua/include/layout.lua from package keys")

// layoutFile is the generated include; TestLayoutInclude writes it.
const layoutFile = "lua/include/layout.lua"

// layoutConstant is one line of layout.lua: a Lua name, its value (a Go
// string, or an integer), and the Go fact it comes from.
type layoutConstant struct {
	name  string
	value any
	from  string
}

// layoutConstants lists what the scripts share with Go, every value taken
// from the Go code that owns it (a key suffix from the keys.Session method
// that builds the key), in the order layout.lua lists them.
func layoutConstants() [][]layoutConstant {
	s := keys.For("p", "s")
	suffix := func(key string) string { return strings.TrimPrefix(key, s.Base()) }
	r := keys.ReadyFor("p", 0)
	ready := func(key string) string {
		return key[strings.LastIndex(key, "}:")+2:]
	}
	heads := suffix(s.Heads(0))
	return [][]layoutConstant{{
		{"KEY_COUNT", suffix(s.Count()), "keys.Session.Count"},
		{"KEY_SENTINEL", suffix(s.Sentinel()), "keys.Session.Sentinel"},
		{"KEY_CLEAR", suffix(s.Clear()), "keys.Session.Clear"},
		{"KEY_LOG", suffix(s.Log()), "keys.Session.Log"},
		{"KEY_ID", suffix(s.ID("")), "keys.Session.ID"},
		{"KEY_ID_BLOCK", suffix(s.IDBlock("")), "keys.Session.IDBlock"},
		{"KEY_HEADS", heads[:len(heads)-1], "keys.Session.Heads"},
		{"KEY_CURSORS", suffix(s.Cursors()), "keys.Session.Cursors"},
		{"KEY_RUNNABLE", suffix(s.Runnable()), "keys.Session.Runnable"},
		{"KEY_TYPED", suffix(s.Typed()), "keys.Session.Typed"},
		{"KEY_TYPE", suffix(s.Type("")), "keys.Session.Type"},
		{"KEY_PINS", suffix(s.Pins()), "keys.Session.Pins"},
		{"KEY_SNAP", suffix(s.Snap("")), "keys.Session.Snap"},
		{"KEY_SNAP_HISTORY", suffix(s.SnapHistory("")), "keys.Session.SnapHistory"},
		{"KEY_SNAP_REDUCERS", suffix(s.SnapReducers()), "keys.Session.SnapReducers"},
		{"KEY_PRESENCE", suffix(s.Presence()), "keys.Session.Presence"},
		{"KEY_LIVE", suffix(s.Live()), "keys.Session.Live"},
		{"KEY_FLIGHT", suffix(s.Flight()), "keys.Session.Flight"},
		{"KEY_SKIP", suffix(s.Skip()), "keys.Session.Skip"},
		{"KEY_FLOOR", suffix(s.Floor()), "keys.Session.Floor"},
		{"KEY_SWEEP", suffix(s.Sweep()), "keys.Session.Sweep"},
		{"KEY_SWEEP_DROP", suffix(s.SweepDrop()), "keys.Session.SweepDrop"},
		{"KEY_FOLLOWED", suffix(s.Followed()), "keys.Session.Followed"},
		{"KEY_LISTED", suffix(s.Listed()), "keys.Session.Listed"},
		// string.sub(KEYS[1], 1, COUNT_CUT) is the session's base.
		{"COUNT_CUT", -1 - len(suffix(s.Count())), "keys.Session.Count"},
		{"READY_VERSIONS", ready(r.Versions()), "keys.Ready.Versions"},
		{"READY_DEAD", ready(r.Dead()), "keys.Ready.Dead"},
		{"READY_DEAD_COUNTS", ready(r.DeadCounts()), "keys.Ready.DeadCounts"},
		{"READY_CUT", -1 - len(ready(r.Index())), "keys.Ready.Index"},
	}, {
		{"COL_ATTEMPTS", rows.ColAttempts, "rows.ColAttempts"},
		{"COL_FIRST_CLAIMED", rows.ColFirstClaimed, "rows.ColFirstClaimed"},
		{"COL_LAST_CLAIMED", rows.ColLastClaimed, "rows.ColLastClaimed"},
		{"COL_HOLDER", rows.ColHolder, "rows.ColHolder"},
		{"COL_EXPIRY", rows.ColExpiry, "rows.ColExpiry"},
		{"COL_FAILURES", rows.ColFailures, "rows.ColFailures"},
		{"COL_LAST_FAILED", rows.ColLastFailed, "rows.ColLastFailed"},
		{"COL_LAST_FAILED_ATTEMPT", rows.ColLastFailedAttempt, "rows.ColLastFailedAttempt"},
		{"COL_ERROR", rows.ColError, "rows.ColError"},
		{"COL_DEAD", rows.ColDeadLettered, "rows.ColDeadLettered"},
		{"COL_PROCESSED", rows.ColProcessed, "rows.ColProcessed"},
		{"COL_RETURNED", rows.ColReturnedIDs, "rows.ColReturnedIDs"},
		{"COL_KIND", rows.ColKind, "rows.ColKind"},
		{"COL_NEXT", rows.ColNext, "rows.ColNext"},
		{"COL_CANCELLED", rows.ColCancelled, "rows.ColCancelled"},
		{"COL_PINS", rows.ColPins, "rows.ColPins"},
		{"CURSOR_HEAD", ":" + rows.CursorHead, "rows.CursorHead"},
		{"CURSOR_POSITION", ":" + rows.CursorPosition, "rows.CursorPosition"},
		{"CURSOR_TAIL", ":" + rows.CursorTail, "rows.CursorTail"},
		{"CURSOR_TYPES", ":" + rows.CursorTypes, "rows.CursorTypes"},
	}, {
		{"CLEAR_TYPE", a2redis.ClearEventType, "a2redis.ClearEventType"},
		{"CHUNK", rows.HeadChunkSize, "rows.HeadChunkSize"},
		{"HELD", keys.HeldOffset, "keys.HeldOffset"},
		{"CHUNK_PIN", rows.ChunkPin, "rows.ChunkPin"},
		{"CHUNK_PIN_VALUE", rows.ChunkPinValue, "rows.ChunkPinValue"},
		{"CHUNK_PIN_FROM", rows.ChunkPinFrom, "rows.ChunkPinFrom"},
		{"SLICE", scripts.SliceArgs, "scripts.SliceArgs"},
		{"PENDING_SCAN", scripts.PendingScan, "scripts.PendingScan"},
		{"PENDING_PAGE", scripts.PendingPage, "scripts.PendingPage"},
		{"CLAIM_SCAN", scripts.ClaimScan, "scripts.ClaimScan"},
		{"SKIP_AFTER", scripts.SkipAfter, "scripts.SkipAfter"},
		{"TRIM_HELD_SCAN", scripts.TrimHeldScan, "scripts.TrimHeldScan"},
		{"TAKEOVER_RELEASE", scripts.TakeoverRelease, "scripts.TakeoverRelease"},
		{"SWEEP_BUDGET", scripts.SweepBudget, "scripts.SweepBudget"},
		{"RATE_GRACE", scripts.RateGrace, "scripts.RateGrace"},
		{"DEAD_SCAN", scripts.DeadScan, "scripts.DeadScan"},
		{"READY_MARK", scripts.ReadyMark, "scripts.ReadyMark"},
	}}
}

// renderLayout is layout.lua's text.
func renderLayout() string {
	var b strings.Builder
	b.WriteString(`-- Code generated by "go test -run TestLayoutInclude -update" (layout_test.go
-- at the repository root) from the Go code named on each line. DO NOT EDIT.
--
-- layout: what the scripts share with Go, spelled once. KEY_* are the
-- suffixes of a session's keys after its base '<prefix>:{<tag>}:' (KEY_ID,
-- KEY_ID_BLOCK, KEY_HEADS, KEY_TYPE, KEY_SNAP and KEY_SNAP_HISTORY are
-- followed by the id, nonce, chunk number, hex type or reducer); COL_* the
-- columns of a head row ('<index>:<row>:<column>' in a heads chunk);
-- CURSOR_* the fields of a cursor record ('<cursor id><field>' in the
-- cursors hash); then the constants and bounds both sides use.
`)
	for i, group := range layoutConstants() {
		if i > 0 {
			b.WriteString("\n")
		}
		for _, c := range group {
			var v string
			switch x := c.value.(type) {
			case string:
				v = luaQuote(x)
			case int:
				v = strconv.Itoa(x)
			case int64:
				v = strconv.FormatInt(x, 10)
			default:
				panic(fmt.Sprintf("%s: %T", c.name, c.value))
			}
			fmt.Fprintf(&b, "local %s = %s -- %s\n", c.name, v, c.from)
		}
	}
	return b.String()
}

// luaQuote quotes s as a Lua string literal: control bytes as \ddd.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 {
			fmt.Fprintf(&b, "\\%d", c)
		} else {
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// TestLayoutInclude checks lua/include/layout.lua is what package keys
// (and the other Go owners of its constants) say; -update rewrites it.
func TestLayoutInclude(t *testing.T) {
	want := renderLayout()
	if *update {
		if err := os.WriteFile(layoutFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(layoutFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: run go test -run TestLayoutInclude -update at the repository root", layoutFile)
	}
	for _, group := range layoutConstants() {
		for _, c := range group {
			if s, ok := c.value.(string); ok && strings.ContainsAny(s, "'\\") {
				t.Errorf("%s = %q: a quote or backslash would need escaping", c.name, s)
			}
		}
	}
	if len(rows.ChunkPinValue) <= 64 {
		t.Errorf("rows.ChunkPinValue is %d bytes; it must exceed hash-max-listpack-value (64)", len(rows.ChunkPinValue))
	}
}

// TestNoScriptSpellsTheLayout checks no Lua file but layout.lua spells a
// key suffix, a column or a cursor field by hand: each is a quoted literal
// concatenated to a key or a row prefix (`.. 'log'`, `.. 'd'`), a list of
// quoted columns, or a quoted column passed to a row helper.
func TestNoScriptSpellsTheLayout(t *testing.T) {
	var names []string
	for _, group := range layoutConstants()[:2] {
		for _, c := range group {
			if s, ok := c.value.(string); ok {
				names = append(names, regexp.QuoteMeta(s))
			}
		}
	}
	alt := strings.Join(names, "|")
	concat := regexp.MustCompile(`\.\.\s*'(` + alt + `)'`)
	listed := regexp.MustCompile(`\{\s*'(` + alt + `)'(\s*,\s*'(` + alt + `)')*\s*\}`)
	argument := regexp.MustCompile(`(put_row|drop_row|row_field)\([^,()]+,[^,()]+,\s*'(` + alt + `)'`)
	files, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	includes, err := filepath.Glob("lua/include/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, includes...)
	comment := regexp.MustCompile(`--.*`)
	for _, file := range files {
		if file == layoutFile {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(src), "\n") {
			code := comment.ReplaceAllString(line, "")
			for _, re := range []*regexp.Regexp{concat, listed, argument} {
				if m := re.FindString(code); m != "" {
					t.Errorf("%s:%d spells %s: use layout.lua's name", file, n+1, m)
				}
			}
		}
	}
}
