// Package scripts composes the store's Lua scripts: it resolves the
// `--@include` lines of lua/*.lua against lua/include/, drops the include
// functions a script never calls (Shake), and builds each script once
// without and once with Upstash's key-locking shebang.
//
// The scripts live in the repository's lua/ folder, which only the root
// package can embed (a go:embed pattern cannot name a parent directory):
// package a2redis hands the embedded folder over with SetSource from its
// init, which runs before any package that imports a2redis.
package scripts

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/redis/rueidis"
)

// The shebangs that let Upstash lock only a script's hash tags instead of the
// whole database. Redis and Valkey reject the flag; see the key-locking probe
// in redisstore.
const (
	KeyLockingShebang         = "#!lua flags=allow-key-locking"
	ReadOnlyKeyLockingShebang = "#!lua flags=no-writes,allow-key-locking"
)

// IsFlagRejection reports whether err is a server's rejection of the
// key-locking shebang: Redis and Valkey reject the flag itself, miniredis
// any shebang at all.
func IsFlagRejection(err error) bool {
	var reply *rueidis.RedisError
	if !errors.As(err, &reply) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "shebang") || strings.Contains(msg, "near '#'") ||
		strings.Contains(msg, "unexpected flag") || strings.Contains(msg, "unknown lua flag")
}

// Script is one composed Lua script: its source with every include resolved,
// built once without and once with the key-locking shebang.
type Script struct {
	// Name is the file name without ".lua", e.g. "append".
	Name string
	// Source is the composed source, without a shebang: includes resolved,
	// and the include functions it never calls dropped (see Shake).
	Source string
	// ReadOnly marks scripts that never write (they take Upstash's shared
	// lock when key-locking is on).
	ReadOnly bool
	// Includes lists the includes composed into Source, in order.
	Includes []string

	plain, locking *rueidis.Lua
}

// Lua returns the script to run: with the key-locking shebang when
// keyLocking is set.
func (s *Script) Lua(keyLocking bool) *rueidis.Lua {
	if keyLocking {
		return s.locking
	}
	return s.plain
}

// all holds the scripts SetSource composed.
var all map[string]*Script

// SetSource composes every script of fsys (see Load) for All: the
// repository's lua/ folder, with the scripts at its top and the includes in
// include/. Package a2redis calls it from its init with the embedded folder,
// so All is set before any code that imports a2redis runs. It panics when a
// script does not compose; the tests compose every script, so a released
// build never does.
func SetSource(fsys fs.FS) {
	scripts, err := Load(fsys)
	if err != nil {
		panic(err)
	}
	all = scripts
}

// All returns every composed script, by name. It panics when no source was
// set, which means package a2redis is not linked into the program.
func All() map[string]*Script {
	if all == nil {
		panic("a2redis: no Lua scripts: package github.com/a2redis/a2redis sets them from its init")
	}
	return all
}

// Load composes every top-level *.lua file of fsys, resolving
// `--@include NAME` lines against include/NAME.lua. Each include is composed
// once, before the code that includes it; a missing or circular include is
// an error. A `--@readonly` line marks a read-only script.
func Load(fsys fs.FS) (map[string]*Script, error) {
	names, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return nil, err
	}
	scripts := make(map[string]*Script, len(names))
	for _, file := range names {
		c := composer{fsys: fsys, done: map[string]bool{}, active: map[string]bool{}}
		body, readOnly, err := c.compose(file)
		if err != nil {
			return nil, fmt.Errorf("a2redis: script %s: %w", file, err)
		}
		body = Shake(body)
		name := strings.TrimSuffix(file, ".lua")
		shebang := KeyLockingShebang
		if readOnly {
			shebang = ReadOnlyKeyLockingShebang
		}
		scripts[name] = &Script{
			Name:     name,
			Source:   body,
			ReadOnly: readOnly,
			Includes: c.order,
			plain:    rueidis.NewLuaScript(body),
			locking:  rueidis.NewLuaScript(shebang + "\n" + body),
		}
	}
	return scripts, nil
}

// UnusedIncludes lists the files of fsys's include/ folder that no script
// of scripts composes.
func UnusedIncludes(fsys fs.FS, scripts map[string]*Script) ([]string, error) {
	files, err := fs.Glob(fsys, "include/*.lua")
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, s := range scripts {
		for _, inc := range s.Includes {
			used[inc] = true
		}
	}
	var unused []string
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".lua")
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	return unused, nil
}

var (
	functionStart = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	identifier    = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
)

// Shake drops the top-level local functions a composed script never calls,
// directly or through the functions it keeps. Redis runs a script's whole
// chunk on every call, so every function an include defines costs a closure
// per call whether it is used or not. A top-level function is a line
// `local function NAME(` at column 0 through the next line that is exactly
// `end` (or that line alone when it ends with ` end`), with the comment lines right above it; everything else is kept and
// is where the search for used names starts.
func Shake(src string) string {
	lines := strings.Split(src, "\n")
	type block struct {
		name        string
		first, last int // lines, inclusive, comments included
		body        string
	}
	var blocks []block
	inBlock := make([]int, len(lines)) // block number + 1, or 0
	for i := 0; i < len(lines); i++ {
		m := functionStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		end := i
		if !strings.HasSuffix(strings.TrimSpace(lines[i]), " end") {
			for end < len(lines) && lines[end] != "end" {
				end++
			}
		}
		if end == len(lines) {
			return src // not the shape this understands: keep everything
		}
		first := i
		for first > 0 && inBlock[first-1] == 0 && strings.HasPrefix(lines[first-1], "--") {
			first--
		}
		blocks = append(blocks, block{name: m[1], first: first, last: end, body: strings.Join(lines[i:end+1], "\n")})
		for j := first; j <= end; j++ {
			inBlock[j] = len(blocks)
		}
		i = end
	}
	byName := map[string]int{}
	for i, b := range blocks {
		byName[b.name] = i
	}
	used := make([]bool, len(blocks))
	var queue []int
	mark := func(text string) {
		for _, word := range identifier.FindAllString(text, -1) {
			if i, ok := byName[word]; ok && !used[i] {
				used[i] = true
				queue = append(queue, i)
			}
		}
	}
	var roots strings.Builder
	for i, line := range lines {
		if inBlock[i] == 0 && !strings.HasPrefix(strings.TrimSpace(line), "--") {
			roots.WriteString(line)
			roots.WriteByte('\n')
		}
	}
	mark(roots.String())
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		mark(blocks[i].body)
	}
	var out strings.Builder
	for i, line := range lines {
		if b := inBlock[i]; b != 0 && !used[b-1] {
			continue
		}
		out.WriteString(line)
		if i < len(lines)-1 {
			out.WriteByte('\n')
		}
	}
	return out.String()
}

type composer struct {
	fsys   fs.FS
	done   map[string]bool
	active map[string]bool
	order  []string
}

func (c *composer) compose(file string) (string, bool, error) {
	src, err := fs.ReadFile(c.fsys, file)
	if err != nil {
		return "", false, err
	}
	var out strings.Builder
	readOnly := false
	scan := bufio.NewScanner(strings.NewReader(string(src)))
	scan.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for scan.Scan() {
		line := scan.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "--@readonly":
			if strings.HasPrefix(file, "include/") {
				return "", false, fmt.Errorf("%s: --@readonly marks scripts, not includes", file)
			}
			readOnly = true
		case strings.HasPrefix(trimmed, "--@include "):
			name := strings.TrimSpace(strings.TrimPrefix(trimmed, "--@include "))
			if c.done[name] {
				continue
			}
			if c.active[name] {
				return "", false, fmt.Errorf("include %q is circular", name)
			}
			c.active[name] = true
			body, _, err := c.compose("include/" + name + ".lua")
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return "", false, fmt.Errorf("include %q not found", name)
				}
				return "", false, err
			}
			delete(c.active, name)
			c.done[name] = true
			c.order = append(c.order, name)
			out.WriteString(body)
		case strings.HasPrefix(trimmed, "--@"):
			return "", false, fmt.Errorf("unknown directive %q", trimmed)
		default:
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String(), readOnly, scan.Err()
}
