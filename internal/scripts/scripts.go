// Package scripts composes the store's Lua scripts: it resolves the
// `--@include` lines of lua/*.lua against lua/include/, pastes the named
// blocks `--@inline` lines ask for, drops the include functions and
// constants a script never uses (Shake), and builds each script once
// without and once with Upstash's key-locking shebang.
//
// The directives, each a line of its own:
//
//   - `--@include NAME` composes include/NAME.lua here, once per script.
//   - `--@readonly` marks a script that never writes.
//   - `--@block NAME` … `--@end`, in an include, delimit a named block:
//     lines composed in place like any other, which a script may also
//     paste elsewhere.
//   - `--@inline NAME [old=new …]` pastes block NAME (from any include),
//     re-indented to the directive's indentation, with each identifier old
//     renamed new (outside strings and comments). The flat scripts — the
//     hot paths, written without the includes' helpers and state, which a
//     script pays for on every call — take what they share with the
//     general scripts this way: one text, no function call.
//
// include/layout.lua is generated from package keys (the root package's
// TestLayoutInclude writes it with -update): the key suffixes, head-row
// columns, cursor-record fields and the constants Go and Lua share, so no
// other Lua file spells one. A composed script has their values written in
// as literals (Constants): they cost it no local and no upvalue.
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
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Bounds the scripts keep, generated into lua/include/layout.lua.
const (
	// SliceArgs is how many arguments a script passes to one variadic
	// command at most (util's sliced): unpack is bounded by the Lua stack
	// (about 8,000 values on Redis, fewer on miniredis's gopher-lua), so
	// every variadic call of a list the caller sizes is cut into calls of
	// at most SliceArgs arguments. It is even, so field/value and
	// score/member pairs stay together.
	SliceArgs = 1000
	// PendingScan is how many of the runnable set's heads, newest first, a
	// write reads at most to tell whether a served consumer has a live
	// head; past it, it answers "maybe" (HasPending is a hint).
	PendingScan = 1024
	// PendingPage is the page size of that scan: PendingScan/PendingPage
	// ZREVRANGEBYSCORE calls at most.
	PendingPage = 64
	// ClaimScan is the fewest heads a claim reads (free heads of consumers
	// it does not serve, lapsed claims) before it stops and replies how far
	// it got; it reads up to max(ClaimScan, 4 × its limit).
	ClaimScan = 1024
	// SkipAfter is how many free heads a claim serving some consumers walks
	// before it records where each served consumer's free heads begin
	// (keys.Session.Skip): the next claims start there. A walk shorter than
	// this leaves no mark (a small session keeps no skip key); a mark once
	// recorded is kept up to date by every claim that walks past it.
	SkipAfter = 256
	// TrimHeldScan is the most held heads a trim reads to find the lowest
	// index any head holds (lua/trim.lua): a session with more held heads
	// than this is not trimmed until fewer are held.
	TrimHeldScan = 1000
	// SweepBudget is about how many entries, fields or keys one reclaim
	// call's sweep of a past lifetime handles (lua/include/sweep.lua); a
	// big session sweeps over many calls, each well under 20 ms.
	SweepBudget = 250
	// TakeoverRelease is the most of a crashed holder's other lapsed heads
	// one takeover releases (claim.lua): a larger pile is released over
	// several takeovers, so none holds the server long however many heads
	// the holder had.
	TakeoverRelease = 128
	// RateGrace is how long, in ms, a consumer's rate limiter outlives its
	// window (rate_take sets its expiry that far past the window's end),
	// so a reader tells a running window by an expiry above it.
	RateGrace = 1000
	// DeadScan is how many of a session's dead-lettered heads a write that
	// changed them reads at most to name their consumers for the dead
	// index (keys.Ready.DeadCounts); past it, the listed consumers are
	// marked incomplete.
	DeadScan = 64
	// ReadyMark starts the ready mark a write script appends to its reply
	// when it changed the session's runnable set (util's ready_mark); the
	// mark alone means "nothing changed". It is no text a reply otherwise
	// holds.
	ReadyMark = "\x01R"
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
	// Inlined lists the includes whose blocks Source pastes (`--@inline`),
	// sorted.
	Inlined []string

	plain, locking *rueidis.Lua
	runs           atomic.Int64
}

// Ran counts one run of the script by a store (Runs reads the count).
func (s *Script) Ran() { s.runs.Add(1) }

// Runs returns how many times stores of this process ran the script over a
// session: tests use it to tell which path an operation took.
func (s *Script) Runs() int64 { return s.runs.Load() }

// Lua returns the script to run: with the key-locking shebang when
// keyLocking is set.
func (s *Script) Lua(keyLocking bool) *rueidis.Lua {
	if keyLocking {
		return s.locking
	}
	return s.plain
}

// generalOnly is SetGeneralOnly's switch.
var generalOnly atomic.Bool

// SetGeneralOnly makes every store of the process run the general scripts
// only (append, claim, complete_many, complete_event), never the flat fast
// paths the store tries first (append_one, append_targeted, append_plain,
// claim_fast, complete_fast), so that a test can run the same operations
// through both and tell the paths apart (the differential test's
// -scripts=general). Outcomes are the same either way; only the cost
// differs.
func SetGeneralOnly(on bool) { generalOnly.Store(on) }

// GeneralOnly reports whether SetGeneralOnly turned the fast paths off.
func GeneralOnly() bool { return generalOnly.Load() }

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
// an error. A `--@readonly` line marks a read-only script. `--@inline`
// lines paste the blocks include files define (see the package comment); an
// unknown, circular or unterminated block, or a rename naming no identifier
// of its block, is an error.
func Load(fsys fs.FS) (map[string]*Script, error) {
	names, err := fs.Glob(fsys, "*.lua")
	if err != nil {
		return nil, err
	}
	blocks, err := readBlocks(fsys)
	if err != nil {
		return nil, err
	}
	layout, err := layoutConstants(fsys)
	if err != nil {
		return nil, err
	}
	scripts := make(map[string]*Script, len(names))
	for _, file := range names {
		c := composer{fsys: fsys, blocks: blocks, done: map[string]bool{}, active: map[string]bool{}}
		body, readOnly, err := c.compose(file)
		if err != nil {
			return nil, fmt.Errorf("a2redis: script %s: %w", file, err)
		}
		body = Constants(Shake(body), layout)
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
			Inlined:  c.inlinedFiles(),
			plain:    rueidis.NewLuaScript(body),
			locking:  rueidis.NewLuaScript(shebang + "\n" + body),
		}
	}
	return scripts, nil
}

// UnusedIncludes lists the files of fsys's include/ folder that no script
// of scripts composes or pastes a block of.
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
		for _, inc := range s.Inlined {
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
	// A constant: an upper-case local set to a number or a plain string.
	constantLine    = regexp.MustCompile(`^local ([A-Z][A-Z0-9_]*) = (-?[0-9]+|'(?:[^'\\]|\\.)*')( -- .*)?$`)
	wholeIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Shake drops the top-level local functions a composed script never calls,
// directly or through the functions it keeps, and the constants it never
// names. Redis runs a script's whole chunk on every call, so every function
// an include defines costs a closure per call whether it is used or not,
// and every constant a register (Lua allows 200 locals per function). A
// top-level function is a line `local function NAME(` at column 0 through
// the next line that is exactly `end` (or that line alone when it ends with
// ` end`); a constant a line `local NAME = <number or plain string>` at
// column 0, NAME in upper case; each with the comment lines right above it.
// Everything else is kept and is where the search for used names starts.
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
		constant := false
		if m == nil {
			if m = constantLine.FindStringSubmatch(lines[i]); m == nil {
				continue
			}
			constant = true
		}
		end := i
		if !constant && !strings.HasSuffix(strings.TrimSpace(lines[i]), " end") {
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
	fsys    fs.FS
	blocks  map[string]block
	inlined map[string]bool // include names whose blocks were pasted
	done    map[string]bool
	active  map[string]bool
	order   []string
}

// block is a named block of an include: its lines between `--@block NAME`
// and `--@end`.
type block struct {
	file  string
	lines []string
}

func (c *composer) inlinedFiles() []string {
	names := make([]string, 0, len(c.inlined))
	for name := range c.inlined {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// layoutConstants returns the names of the constants include/layout.lua
// defines (none when there is no such file).
func layoutConstants(fsys fs.FS) (map[string]bool, error) {
	src, err := fs.ReadFile(fsys, "include/layout.lua")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		if m := constantLine.FindStringSubmatch(line); m != nil {
			names[m[1]] = true
		}
	}
	return names, nil
}

// Constants writes the value of each constant of names (the generated
// layout's) where a composed script uses it, and drops its definition: the
// composed script spells the literal, as a hand-written one would, so a
// constant costs no local and no upvalue at run time. A negative number is
// written in parentheses.
func Constants(src string, names map[string]bool) string {
	if len(names) == 0 {
		return src
	}
	values := map[string]string{}
	lines := strings.Split(src, "\n")
	kept := lines[:0]
	for _, line := range lines {
		if m := constantLine.FindStringSubmatch(line); m != nil && names[m[1]] {
			value := m[2]
			if strings.HasPrefix(value, "-") {
				value = "(" + value + ")"
			}
			values[m[1]] = value
			continue
		}
		kept = append(kept, line)
	}
	used := map[string]bool{}
	for i, line := range kept {
		kept[i] = Rename(line, values, used)
	}
	return strings.Join(kept, "\n")
}

// readBlocks collects the blocks every include file of fsys defines.
func readBlocks(fsys fs.FS) (map[string]block, error) {
	files, err := fs.Glob(fsys, "include/*.lua")
	if err != nil {
		return nil, err
	}
	blocks := map[string]block{}
	for _, file := range files {
		src, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		name, start := "", 0
		lines := strings.Split(string(src), "\n")
		for i, line := range lines {
			trimmed := strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(trimmed, "--@block "):
				if name != "" {
					return nil, fmt.Errorf("a2redis: %s:%d: block %q opens inside block %q", file, i+1, strings.TrimSpace(trimmed[len("--@block "):]), name)
				}
				name, start = strings.TrimSpace(trimmed[len("--@block "):]), i+1
				if prev, ok := blocks[name]; ok {
					return nil, fmt.Errorf("a2redis: %s:%d: block %q is defined in %s too", file, i+1, name, prev.file)
				}
			case trimmed == "--@end":
				if name == "" {
					return nil, fmt.Errorf("a2redis: %s:%d: --@end outside a block", file, i+1)
				}
				blocks[name] = block{file: file, lines: lines[start:i]}
				name = ""
			}
		}
		if name != "" {
			return nil, fmt.Errorf("a2redis: %s: block %q has no --@end", file, name)
		}
	}
	return blocks, nil
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
		case strings.HasPrefix(trimmed, "--@block ") || trimmed == "--@end":
			if !strings.HasPrefix(file, "include/") {
				return "", false, fmt.Errorf("%s: blocks are defined in includes", file)
			}
		case strings.HasPrefix(trimmed, "--@inline "):
			indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			if err := c.inline(&out, strings.TrimPrefix(trimmed, "--@inline "), indent, map[string]bool{}, nil, map[string]bool{}); err != nil {
				return "", false, fmt.Errorf("%s: %w", file, err)
			}
		case strings.HasPrefix(trimmed, "--@"):
			return "", false, fmt.Errorf("unknown directive %q", trimmed)
		default:
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String(), readOnly, scan.Err()
}

// inline writes the block an `--@inline` directive names (spec: "NAME
// [old=new …]"), re-indented to indent, its own `--@inline` lines expanded
// (with the renames of the directives around them too) and its identifiers
// renamed. outer holds the renames of the directives around this one;
// used collects the old names met in the whole expansion.
func (c *composer) inline(out *strings.Builder, spec, indent string, active map[string]bool, outer map[string]string, used map[string]bool) error {
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return errors.New("--@inline names no block")
	}
	name := fields[0]
	b, ok := c.blocks[name]
	if !ok {
		return fmt.Errorf("block %q not found", name)
	}
	if active[name] {
		return fmt.Errorf("block %q is circular", name)
	}
	active[name] = true
	defer delete(active, name)
	if c.inlined == nil {
		c.inlined = map[string]bool{}
	}
	c.inlined[strings.TrimSuffix(path.Base(b.file), ".lua")] = true
	own := map[string]string{}
	for _, f := range fields[1:] {
		old, repl, ok := strings.Cut(f, "=")
		if !ok || !wholeIdentifier.MatchString(old) || !wholeIdentifier.MatchString(repl) {
			return fmt.Errorf("--@inline %s: %q is not a rename old=new", name, f)
		}
		own[old] = repl
	}
	// This directive's renames, then the outer ones (an outer rename of a
	// name this directive renames to applies to the result).
	renames := map[string]string{}
	for old, repl := range outer {
		renames[old] = repl
	}
	for old, repl := range own {
		if r, ok := outer[repl]; ok {
			repl = r
		}
		renames[old] = repl
	}
	// The block's own indentation, which indent replaces.
	common, first := "", true
	for _, line := range b.lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		lead := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		if first || len(lead) < len(common) {
			common, first = lead, false
		}
	}
	mine := map[string]bool{}
	for _, line := range b.lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			out.WriteByte('\n')
			continue
		}
		lineIndent := indent + strings.TrimPrefix(line[:len(line)-len(strings.TrimLeft(line, " \t"))], common)
		if strings.HasPrefix(trimmed, "--@inline ") {
			inner := map[string]bool{}
			if err := c.inline(out, strings.TrimPrefix(trimmed, "--@inline "), lineIndent, active, renames, inner); err != nil {
				return fmt.Errorf("in block %q: %w", name, err)
			}
			for old := range inner {
				mine[old] = true
			}
			continue
		}
		out.WriteString(lineIndent)
		out.WriteString(Rename(trimmed, renames, mine))
		out.WriteByte('\n')
	}
	for old := range own {
		if !mine[old] {
			return fmt.Errorf("--@inline %s: %s names no identifier of the block", name, old)
		}
	}
	for old := range mine {
		used[old] = true
	}
	return nil
}

// Rename renames the identifiers of one line of Lua: each whole word old of
// renames becomes renames[old], outside string literals and comments (a
// word after '.' or ':', or a table constructor's key, is a field name,
// never renamed). used records the old names it met.
func Rename(line string, renames map[string]string, used map[string]bool) string {
	if len(renames) == 0 {
		return line
	}
	var out strings.Builder
	depth := 0 // open braces of table constructors so far
	for i := 0; i < len(line); {
		ch := line[i]
		switch {
		case ch == '-' && strings.HasPrefix(line[i:], "--"):
			out.WriteString(line[i:])
			return out.String()
		case ch == '\'' || ch == '"':
			j := i + 1
			for j < len(line) && line[j] != ch {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(line))
			out.WriteString(line[i:j])
			i = j
		case ch == '_' || ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z':
			j := i
			for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= 'a' && line[j] <= 'z' || line[j] >= '0' && line[j] <= '9') {
				j++
			}
			word := line[i:j]
			field := i > 0 && (line[i-1] == '.' || line[i-1] == ':') && !(i > 1 && line[i-2] == '.')
			if !field {
				// A key of a table constructor: { name = … } or , name = …
				before := strings.TrimRight(line[:i], " \t")
				after := strings.TrimLeft(line[j:], " \t")
				field = (strings.HasSuffix(before, "{") || strings.HasSuffix(before, ",") && depth > 0) &&
					strings.HasPrefix(after, "=") && !strings.HasPrefix(after, "==")
			}
			if repl, ok := renames[word]; ok && !field {
				used[word] = true
				word = repl
			}
			out.WriteString(word)
			i = j
		default:
			switch ch {
			case '{':
				depth++
			case '}':
				depth--
			}
			out.WriteByte(ch)
			i++
		}
	}
	return out.String()
}
