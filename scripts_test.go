package a2redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
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
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	for _, name := range scriptNames() {
		code := comment.ReplaceAllString(scripts.All()[name].Source, "")
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

// TestScriptConstantsMatchGo checks the constants util.lua spells again.
func TestScriptConstantsMatchGo(t *testing.T) {
	src, err := os.ReadFile("lua/include/util.lua")
	if err != nil {
		t.Fatal(err)
	}
	clearType := regexp.MustCompile(`(?m)^local CLEAR_TYPE = '([^'\\]*)'$`).FindSubmatch(src)
	if clearType == nil {
		t.Fatal("util.lua has no line local CLEAR_TYPE = '...'")
	}
	if got := string(clearType[1]); got != a2redis.ClearEventType {
		t.Errorf("util.lua CLEAR_TYPE = %q, a2redis.ClearEventType = %q", got, a2redis.ClearEventType)
	}
	chunk := regexp.MustCompile(`(?m)^local CHUNK = (\d+)$`).FindSubmatch(src)
	if chunk == nil {
		t.Fatal("util.lua has no line local CHUNK = <integer>")
	}
	if got, _ := strconv.Atoi(string(chunk[1])); got != keys.HeadChunkSize {
		t.Errorf("util.lua CHUNK = %d, keys.HeadChunkSize = %d", got, keys.HeadChunkSize)
	}
	for name, want := range map[string]string{"CHUNK_PIN": keys.ChunkPin, "CHUNK_PIN_VALUE": keys.ChunkPinValue} {
		m := regexp.MustCompile(`(?m)^local ` + name + ` = '([^'\\]*)'$`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("util.lua has no line local %s = '...'", name)
		}
		if got := string(m[1]); got != want {
			t.Errorf("util.lua %s = %q, keys = %q", name, got, want)
		}
	}
	if len(keys.ChunkPinValue) <= 64 {
		t.Errorf("keys.ChunkPinValue is %d bytes; it must exceed hash-max-listpack-value (64)", len(keys.ChunkPinValue))
	}
}
