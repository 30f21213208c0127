package inspect

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by the caller, usage by writeUsage
	fs.Usage = func() {}
	return fs
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments ("log S --raw" as well as "log --raw S"). After a
// bare "--" everything is positional, so a session id may start with '-'.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" && !flagValue(fs, consumed) {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// flagValue reports whether the last of consumed ("--") was the value of a
// flag given as "-name --" rather than the end-of-flags marker.
func flagValue(fs *flag.FlagSet, consumed []string) bool {
	if len(consumed) < 2 {
		return false
	}
	prev := strings.TrimLeft(consumed[len(consumed)-2], "-")
	if prev == consumed[len(consumed)-2] || strings.Contains(prev, "=") {
		return false
	}
	f := fs.Lookup(prev)
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// urlList is the --url flag: repeatable, each value possibly a
// comma-separated list. The first --url replaces the A2REDIS_URL default.
type urlList struct {
	values  []string
	fromEnv bool
}

func (u *urlList) init(env string) {
	u.values = splitList(env)
	u.fromEnv = true
}

func (u *urlList) list() []string {
	if len(u.values) == 0 {
		return []string{DefaultURL}
	}
	return u.values
}

// String implements flag.Value.
func (u *urlList) String() string { return strings.Join(u.values, ",") }

// Set implements flag.Value.
func (u *urlList) Set(v string) error {
	if u.fromEnv {
		u.values, u.fromEnv = nil, false
	}
	add := splitList(v)
	if len(add) == 0 {
		return fmt.Errorf("empty URL")
	}
	u.values = append(u.values, add...)
	return nil
}

// stringList is a repeatable, comma-separated string flag.
type stringList []string

// String implements flag.Value.
func (s *stringList) String() string { return strings.Join(*s, ",") }

// Set implements flag.Value.
func (s *stringList) Set(v string) error {
	add := splitList(v)
	if len(add) == 0 {
		return fmt.Errorf("empty value")
	}
	*s = append(*s, add...)
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

const usageHead = `a2redis-inspect: look into the a2redis event logs stored in Redis.

Usage:
  a2redis-inspect [global flags] COMMAND [flags] [ARGS]

Commands:
`

const usageTail = `
Global flags (accepted before or after the command):
  --url URL        Redis to read: redis://[user:password@]host:port[/db] or
                   rediss://… for TLS (append ?skip_verify=true to skip
                   certificate verification). Repeat it, or give a
                   comma-separated list, to name the seeds of a Redis Cluster;
                   a single URL finds a cluster by itself.
                   Default: $A2REDIS_URL, else redis://127.0.0.1:6379
  --prefix P       the store's key prefix. Default: $A2REDIS_PREFIX, else a2
  --timeout D      bound on every Redis call (Go duration). Default 10s
  --json           print JSON instead of a table (snake_case fields; times
                   RFC 3339 UTC, null when unset): list commands print one
                   object per line (NDJSON: sessions, log, tail, cursors,
                   dead, presence, workers, ready, redrive --all); info,
                   redrive, cancel and drop print one object.

Every command but redrive, cancel, drop, pause, resume and repair-session only reads. Session commands first check the
prefix's layout with a GET of <prefix>:schema and never create it.

Exit codes:
  0  ok (info and sessions on a prefix with no data included)
  1  error: Redis unreachable, wrong password, another key layout, unknown
     session (or no data under the prefix), redrive, cancel or drop declined …
  2  usage: unknown command or flag, missing argument, bad value

Examples:
  a2redis-inspect --url redis://:secret@10.0.0.5:6379 sessions --match 'order-*'
  a2redis-inspect cursors order-42          # is my consumer stuck? (LAG, STATE)
  a2redis-inspect dead order-42 --json | jq -r .last_error
  a2redis-inspect tail -f order-42
  a2redis-inspect redrive order-42 mailer 17 --retry
  a2redis-inspect redrive order-42 --all --consumer mailer --retry
  a2redis-inspect cancel order-42 mailer 18  # skip a head before it runs
  a2redis-inspect drop order-42             # delete the session (asks first)
  a2redis-inspect workers                   # which workers are alive, what they hold
  a2redis-inspect ready --stats             # work waiting per ready-index shard
`

// writeUsage prints the overall usage: every command with a one-line
// description, the global flags and the exit codes.
func writeUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString(usageHead)
	cmds := commands()
	lefts := make([]string, len(cmds))
	width := len("help [COMMAND]")
	for i, c := range cmds {
		lefts[i] = strings.TrimSpace(c.name + " " + argsText(c))
		width = max(width, len(lefts[i]))
	}
	for i, c := range cmds {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, lefts[i], c.summary)
	}
	fmt.Fprintf(&b, "  %-*s  %s\n", width, "help [COMMAND]", "show this text, or the details of one command")
	b.WriteString(usageTail)
	_, _ = io.WriteString(w, b.String())
}

func synopsis(cmd command) string {
	s := name + " " + cmd.name + " [flags]"
	if len(cmd.args) > 0 {
		s += " " + argsText(cmd)
	}
	return s
}

// writeCommandUsage prints one command's usage with its own flags.
func writeCommandUsage(w io.Writer, cmd command) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s.\n", synopsis(cmd), upperFirst(cmd.summary))
	if cmd.details != "" {
		b.WriteString("\n")
		b.WriteString(strings.TrimRight(cmd.details, "\n"))
		b.WriteString("\n")
	}
	fs := newFlagSet(cmd.name)
	cmd.setup(fs)
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			b.WriteString("\nFlags:\n")
			first = false
		}
		left := "--" + f.Name
		if len(f.Name) == 1 {
			left = "-" + f.Name
		}
		argName, usage := flag.UnquoteUsage(f)
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool {
			if argName == "" || argName == "value" {
				argName = "value"
			}
			left += " " + strings.ToUpper(argName)
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "[]" {
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(&b, "  %-16s %s\n", left, usage)
	})
	b.WriteString("\nGlobal flags: --url, --prefix, --timeout, --json (see '" + name + " help').\n")
	_, _ = io.WriteString(w, b.String())
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// checkIndexArg checks an INDEX argument: a positive event index.
func checkIndexArg(arg string) error {
	if index, err := strconv.ParseInt(arg, 10, 64); err != nil || index < 1 {
		return fmt.Errorf("INDEX %q is not a positive event index", arg)
	}
	return nil
}
