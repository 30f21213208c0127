package a2redis

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua lua/include/*.lua
var luaFiles embed.FS

// The shebangs that let Upstash lock only a script's hash tags instead of the
// whole database. Redis and Valkey reject the flag; see the key-locking probe
// in redisstore.
const (
	KeyLockingShebang         = "#!lua flags=allow-key-locking"
	ReadOnlyKeyLockingShebang = "#!lua flags=no-writes,allow-key-locking"
)

// Script is one composed Lua script: its source with every include resolved,
// built once without and once with the key-locking shebang.
type Script struct {
	// Name is the file name without ".lua", e.g. "append".
	Name string
	// Source is the composed source, without a shebang.
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

// Scripts holds every script of lua/, by name.
var Scripts = mustLoadScripts()

func mustLoadScripts() map[string]*Script {
	sub, err := fs.Sub(luaFiles, "lua")
	if err != nil {
		panic(err)
	}
	scripts, err := LoadScripts(sub)
	if err != nil {
		panic(err)
	}
	return scripts
}

// LoadScripts composes every top-level *.lua file of fsys, resolving
// `--@include NAME` lines against include/NAME.lua. Each include is composed
// once, before the code that includes it; a missing or circular include is
// an error. A `--@readonly` line marks a read-only script.
func LoadScripts(fsys fs.FS) (map[string]*Script, error) {
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
