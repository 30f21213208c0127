package a2redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// scriptNames returns the names of scripts.All(), sorted.
func scriptNames() []string {
	names := make([]string, 0, len(scripts.All()))
	for name := range scripts.All() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// loadEveryScript runs SCRIPT LOAD for every composed script: the server
// compiles it, so a syntax error fails here rather than on first use.
func loadEveryScript(t *testing.T, client rueidis.Client) {
	t.Helper()
	if len(scripts.All()) == 0 {
		t.Fatal("scripts.All() is empty")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range scriptNames() {
		src := scripts.All()[name].Source
		sha, err := client.Do(ctx, client.B().ScriptLoad().Script(src).Build()).ToString()
		if err != nil {
			t.Errorf("SCRIPT LOAD %s: %v", name, err)
			continue
		}
		sum := sha1.Sum([]byte(src))
		if want := hex.EncodeToString(sum[:]); sha != want {
			t.Errorf("SCRIPT LOAD %s returned sha %s, want %s", name, sha, want)
		}
	}
}

func TestScriptsLoadIntoRedisServer(t *testing.T) {
	loadEveryScript(t, redistest.Server(t))
}

func TestScriptsLoadIntoMiniredis(t *testing.T) {
	_, client := redistest.Miniredis(t)
	loadEveryScript(t, client)
}

// TestScriptsOnDiskMatchEmbedded checks the embed pattern covers every
// script file: composing lua/ from disk gives the same scripts.
func TestScriptsOnDiskMatchEmbedded(t *testing.T) {
	disk, err := scripts.Load(os.DirFS("lua"))
	if err != nil {
		t.Fatal(err)
	}
	if len(disk) != len(scripts.All()) {
		t.Errorf("lua/ holds %d scripts, scripts.All() %d", len(disk), len(scripts.All()))
	}
	for name, s := range disk {
		embedded, ok := scripts.All()[name]
		switch {
		case !ok:
			t.Errorf("lua/%s.lua is not embedded", name)
		case embedded.Source != s.Source || embedded.ReadOnly != s.ReadOnly:
			t.Errorf("embedded %s differs from lua/%s.lua on disk", name, name)
		}
	}
}

func TestScriptIncludesAreAllUsed(t *testing.T) {
	unused, err := scripts.UnusedIncludes(os.DirFS("lua"), scripts.All())
	if err != nil {
		t.Fatal(err)
	}
	if len(unused) > 0 {
		t.Errorf("includes no script composes: %v", unused)
	}
}

func TestLoadRejectsBadIncludes(t *testing.T) {
	cases := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"missing include", fstest.MapFS{
			"main.lua": {Data: []byte("--@include nowhere\nreturn 1\n")},
		}, `include "nowhere" not found`},
		{"missing nested include", fstest.MapFS{
			"main.lua":      {Data: []byte("--@include a\nreturn 1\n")},
			"include/a.lua": {Data: []byte("--@include nowhere\nlocal a = 1\n")},
		}, `include "nowhere" not found`},
		{"include of itself", fstest.MapFS{
			"main.lua":      {Data: []byte("--@include a\nreturn 1\n")},
			"include/a.lua": {Data: []byte("--@include a\nlocal a = 1\n")},
		}, `include "a" is circular`},
		{"circular includes", fstest.MapFS{
			"main.lua":      {Data: []byte("--@include a\nreturn 1\n")},
			"include/a.lua": {Data: []byte("--@include b\nlocal a = 1\n")},
			"include/b.lua": {Data: []byte("--@include a\nlocal b = 1\n")},
		}, "circular"},
		{"unknown directive", fstest.MapFS{
			"main.lua": {Data: []byte("--@readonly\n--@inclde a\nreturn 1\n")},
		}, `unknown directive "--@inclde a"`},
		{"unknown directive in an include", fstest.MapFS{
			"main.lua":      {Data: []byte("--@include a\nreturn 1\n")},
			"include/a.lua": {Data: []byte("--@cached\nlocal a = 1\n")},
		}, "unknown directive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loaded, err := scripts.Load(c.files)
			if err == nil {
				t.Fatalf("Load succeeded (%d scripts), want an error containing %q", len(loaded), c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "main.lua") {
				t.Errorf("error %q does not name main.lua and %q", err, c.want)
			}
		})
	}
}

func TestLoadComposesAnIncludeOnce(t *testing.T) {
	// main includes shared directly, twice, and through helper; shared must
	// appear once, before the code that uses it.
	files := fstest.MapFS{
		"main.lua":           {Data: []byte("--@readonly\n--@include shared\n--@include helper\n--@include shared\nreturn shared_value + helper_value\n")},
		"other.lua":          {Data: []byte("--@include helper\nreturn helper_value\n")},
		"include/shared.lua": {Data: []byte("local shared_value = 1\n")},
		"include/helper.lua": {Data: []byte("--@include shared\nlocal helper_value = shared_value + 1\n")},
		"include/unused.lua": {Data: []byte("local unused_value = 3\n")},
	}
	loaded, err := scripts.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	main := loaded["main"]
	if main == nil || len(loaded) != 2 {
		t.Fatalf("Load returned %v, want main and other", loaded)
	}
	if n := strings.Count(main.Source, "local shared_value = 1"); n != 1 {
		t.Errorf("shared composed %d times into main:\n%s", n, main.Source)
	}
	if i, j := strings.Index(main.Source, "local shared_value"), strings.Index(main.Source, "local helper_value"); i > j {
		t.Errorf("shared composed after helper, which uses it:\n%s", main.Source)
	}
	if strings.Contains(main.Source, "--@") {
		t.Errorf("a directive survived composition:\n%s", main.Source)
	}
	if got := strings.Join(main.Includes, ","); got != "shared,helper" {
		t.Errorf("main.Includes = %v, want [shared helper]", main.Includes)
	}
	if !main.ReadOnly || loaded["other"].ReadOnly {
		t.Errorf("ReadOnly: main %v, other %v; want true, false", main.ReadOnly, loaded["other"].ReadOnly)
	}
	if got := strings.Join(loaded["other"].Includes, ","); got != "shared,helper" {
		t.Errorf("other.Includes = %v, want [shared helper]", loaded["other"].Includes)
	}
	unused, err := scripts.UnusedIncludes(files, loaded)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(unused, ",") != "unused" {
		t.Errorf("UnusedIncludes = %v, want [unused]", unused)
	}
}

// TestScriptsDefineEveryHelperTheyUse guards against a composed script that
// compiles (SCRIPT LOAD passes) but fails at run time with "attempted to
// access nonexistent global variable": every include helper (a top-level
// `local function NAME`) that a script names must be defined in its
// composed source, before its first use (Lua locals are lexically scoped).
func TestScriptsDefineEveryHelperTheyUse(t *testing.T) {
	definition := regexp.MustCompile(`(?m)^\s*local function ([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	includes, err := filepath.Glob("lua/include/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	helpers := map[string]string{} // name -> include defining it
	for _, file := range includes {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range definition.FindAllStringSubmatch(string(src), -1) {
			helpers[m[1]] = file
		}
	}
	comment := regexp.MustCompile(`--.*`)
	literal := regexp.MustCompile(`'(?:[^'\\\n]|\\.)*'`)
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	for _, name := range scriptNames() {
		code := comment.ReplaceAllString(literal.ReplaceAllString(scripts.All()[name].Source, "''"), "")
		defined := map[string]int{} // helper -> offset of its definition
		for _, m := range definition.FindAllStringSubmatchIndex(code, -1) {
			defined[code[m[2]:m[3]]] = m[0]
		}
		reported := map[string]bool{}
		for _, at := range word.FindAllStringIndex(code, -1) {
			helper := code[at[0]:at[1]]
			if _, ok := helpers[helper]; !ok || reported[helper] {
				continue
			}
			def, ok := defined[helper]
			switch {
			case !ok:
				t.Errorf("script %s uses %s (from %s) but its composed source does not define it", name, helper, helpers[helper])
			case at[0] < def:
				t.Errorf("script %s uses %s before defining it", name, helper)
			default:
				continue
			}
			reported[helper] = true
		}
	}
}

// TestScriptHeaders checks every script opens with a comment block naming
// its keys and its replies.
func TestScriptHeaders(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(scripts.All()) {
		t.Errorf("lua/ holds %d scripts, scripts.All() %d", len(files), len(scripts.All()))
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var header []string
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		text := strings.Join(header, "\n")
		if len(header) == 0 {
			t.Errorf("%s does not open with a comment block", file)
			continue
		}
		for _, want := range []string{"KEYS[1]", "Repl"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: header comment does not mention %q", file, want)
			}
		}
	}
}

// TestInlinePastesBlocks checks --@block/--@inline: a block composes in
// place in its include, pastes re-indented and renamed (never inside
// strings, comments or after a '.'), expands nested blocks with the outer
// renames, and every misuse is an error.
func TestInlinePastesBlocks(t *testing.T) {
	files := fstest.MapFS{
		"general.lua": {Data: []byte("--@include lib\nreturn twice(2) + noted(0)\n")},
		"flat.lua":    {Data: []byte("local n, out = 2, 0\nif n then\n  --@inline double x=n y=out x2=n2\nend\nreturn out\n")},
		"include/lib.lua": {Data: []byte(strings.Join([]string{
			"local function twice(x)",
			"  local y",
			"  --@block double",
			"  -- y: twice x",
			"  local z, x2 = x, x",
			"  y = z + x2 -- 'x' stays",
			"  --@inline note",
			"  --@end",
			"  return y",
			"end",
			"local function noted(y)",
			"  --@block note",
			"  local t = { x = 'x', [y] = 1 } t.x = y",
			"  --@end",
			"  return t.x",
			"end",
			"",
		}, "\n"))},
	}
	loaded, err := scripts.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	flat := loaded["flat"]
	want := "local n, out = 2, 0\nif n then\n  -- y: twice x\n  local z, n2 = n, n\n  out = z + n2 -- 'x' stays\n  local t = { x = 'x', [out] = 1 } t.x = out\nend\nreturn out"
	if got := strings.TrimSpace(flat.Source); got != want {
		t.Errorf("flat composed to\n%s\nwant\n%s", got, want)
	}
	if strings.Join(flat.Inlined, ",") != "lib" || len(flat.Includes) != 0 {
		t.Errorf("flat: Includes %v, Inlined %v; want none and [lib]", flat.Includes, flat.Inlined)
	}
	if g := loaded["general"].Source; !strings.Contains(g, "  y = z + x2") || strings.Contains(g, "--@") {
		t.Errorf("general composed to\n%s", g)
	}
	client := redistest.Server(t)
	for name, s := range loaded {
		reply, err := client.Do(context.Background(), client.B().Eval().Script(s.Source).Numkeys(0).Build()).AsInt64()
		if err != nil || reply != 4 {
			t.Errorf("EVAL %s = %d, %v; want 4", name, reply, err)
		}
	}

	lib := files["include/lib.lua"]
	for _, c := range []struct {
		name string
		main string
		lib  string
		want string
	}{
		{"unknown block", "--@inline nowhere\n", "", `block "nowhere" not found`},
		{"rename of nothing", "--@inline note q=r\n", "", "q names no identifier"},
		{"bad rename", "--@inline note x\n", "", "is not a rename"},
		{"block in a script", "--@block b\n--@end\n", "", "blocks are defined in includes"},
		{"circular blocks", "--@inline a\n", "--@block a\n--@inline b\n--@end\n--@block b\n--@inline a\n--@end\n", "circular"},
		{"unterminated block", "return 1\n", "--@block a\nlocal a = 1\n", "has no --@end"},
		{"nested block", "return 1\n", "--@block a\n--@block b\n--@end\n--@end\n", "opens inside"},
		{"stray end", "return 1\n", "--@end\n", "outside a block"},
		{"block defined twice", "return 1\n", "--@block note\n--@end\n", "defined in"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{"main.lua": {Data: []byte(c.main)}, "include/lib.lua": lib}
			if c.lib != "" {
				fsys["include/other.lua"] = &fstest.MapFile{Data: []byte(c.lib)}
			}
			_, err := scripts.Load(fsys)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

// TestShakeDropsUnusedConstants: a constant no kept code names is dropped
// with its comment; a used one stays.
func TestShakeDropsUnusedConstants(t *testing.T) {
	src := "-- about A\nlocal A = 'a' -- from Go\nlocal B = 12\nlocal C = '\\1R'\nlocal function f() return C end\nreturn B\n"
	got := scripts.Shake(src)
	if got != "local B = 12\nreturn B\n" {
		t.Errorf("Shake kept\n%s", got)
	}
}

// flatScripts are the hot-path scripts written without the session and
// cursor includes; the store tries them first (scripts.SetGeneralOnly).
var flatScripts = []string{"append_one", "append_targeted", "append_plain", "claim_fast", "complete_fast"}

// TestFlatScriptsCopyNothingByHand guards the one source of the flat
// scripts: no line of code of one (44 bytes or more, comments aside: shorter lines are argument reads and idioms) is
// spelled again in another Lua file. What they share with the general
// scripts, or with each other, they paste from a block (--@inline).
func TestFlatScriptsCopyNothingByHand(t *testing.T) {
	files, err := filepath.Glob("lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	includes, err := filepath.Glob("lua/include/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	at := map[string][]string{} // line -> where it is spelled
	for _, file := range append(files, includes...) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(src), "\n") {
			code := strings.TrimSpace(line)
			if len(code) >= 44 && !strings.HasPrefix(code, "--") {
				at[code] = append(at[code], fmt.Sprintf("%s:%d", file, n+1))
			}
		}
	}
	for _, name := range flatScripts {
		file := "lua/" + name + ".lua"
		for code, places := range at {
			others, mine := 0, false
			for _, p := range places {
				if strings.HasPrefix(p, file+":") {
					mine = true
				} else {
					others++
				}
			}
			if !mine || others == 0 {
				continue
			}
			for _, p := range places {
				if strings.HasPrefix(p, file+":") {
					t.Errorf("%s: %q is spelled %d times (%v): paste it from one block", name, code, len(places), places)
					break
				}
			}
		}
	}
}

// TestLayoutConstantsAreLiterals: a composed script spells each layout
// constant's value where it uses it (scripts.Constants), so no composed
// script names one, and a negative value keeps its sign in any expression.
func TestLayoutConstantsAreLiterals(t *testing.T) {
	src, err := os.ReadFile("lua/include/layout.lua")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z][A-Z0-9_]*) = `).FindAllStringSubmatch(string(src), -1) {
		names[m[1]] = true
	}
	if len(names) < 40 {
		t.Fatalf("layout.lua defines %d constants", len(names))
	}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	comment := regexp.MustCompile(`--.*`)
	for _, name := range scriptNames() {
		for _, w := range word.FindAllString(comment.ReplaceAllString(scripts.All()[name].Source, ""), -1) {
			if names[w] {
				t.Errorf("composed %s still names %s", name, w)
				break
			}
		}
	}
	got := scripts.Constants("local A = -6 -- from Go\nlocal B = 'b'\nreturn x-A .. B .. 'B' -- B", map[string]bool{"A": true, "B": true})
	if want := "return x-(-6) .. 'b' .. 'B' -- B"; got != want {
		t.Errorf("Constants = %q, want %q", got, want)
	}
}
