// Package inspect implements the commands of a2redis-inspect, the operator
// CLI of a2redis (see cmd/a2redis-inspect for the user documentation: the
// commands, their flags, the JSON fields and the exit codes).
//
// Everything a run touches is passed in: the arguments, the input and output
// streams, the environment lookup and the clock ([Env]). The package holds no
// mutable state, so tests run commands in parallel and capture their output.
//
// Every command but redrive, drop, repair-session (and the other commands that say they write) is read-only: a prefix's layout is checked with a
// plain GET of its schema key before a store is built, so pointing the tool
// at a prefix that holds nothing never creates anything.
package inspect

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/redisstore"
)

// The exit codes of a run.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: the command failed (Redis unreachable, wrong password, no
	// data under the prefix, unknown session, redrive declined …).
	ExitError = 1
	// ExitUsage: the command line is wrong (unknown command or flag, missing
	// argument, bad value).
	ExitUsage = 2
)

// Environment variables a run reads through Env.Getenv.
const (
	// EnvURL holds the default for --url (comma-separated for a cluster).
	EnvURL = "A2REDIS_URL"
	// EnvPrefix holds the default for --prefix.
	EnvPrefix = "A2REDIS_PREFIX"
)

// Defaults of the global flags.
const (
	// DefaultURL is used when neither --url nor A2REDIS_URL is given.
	DefaultURL = "redis://127.0.0.1:6379"
	// DefaultTimeout bounds every Redis call unless --timeout says otherwise.
	DefaultTimeout = 10 * time.Second
)

const name = "a2redis-inspect"

// Env is everything a run talks to besides Redis.
type Env struct {
	// Stdin answers the redrive confirmation. Nil reads as empty.
	Stdin io.Reader
	// Stdout receives the command's output (tables or JSON). Nil discards.
	Stdout io.Writer
	// Stderr receives errors, prompts and hints. Nil discards.
	Stderr io.Writer
	// Getenv looks up environment variables (A2REDIS_URL, A2REDIS_PREFIX).
	// Nil: no environment.
	Getenv func(string) string
	// Now is the clock: cursor states ("claimed", "lapsed") and presence
	// expiry are judged by it, and a redrive stamps its time with it. Nil:
	// time.Now.
	Now func() time.Time

	// pageLimit, when positive, replaces the page sizes of the listings
	// (SCAN COUNT, cursors and dead letters per call): tests make pages
	// tiny to cross many page boundaries.
	pageLimit int
}

// options are the global flags.
type options struct {
	urls    urlList
	prefix  string
	timeout time.Duration
	json    bool
}

// app is one run: its environment, flags and connection.
type app struct {
	env    Env
	opts   options
	out    *bufio.Writer
	client rueidis.Client
	store  *redisstore.Store
	addrs  string // the seed addresses, for messages
	seeds  int    // how many seed addresses
	tls    bool   // whether the URLs ask for TLS
}

// need says what a command needs before it runs.
type need int

const (
	needClient  need = iota + 1 // a connection
	needData                    // a connection and a prefix holding this layout (then a store)
	needSession                 // needData, and the session's log must exist
)

// runFunc runs a command with its positional arguments.
type runFunc func(ctx context.Context, a *app, args []string) error

// runner is a command bound to its parsed flags.
type runner struct {
	// check validates the flags and arguments before anything connects;
	// nil accepts everything.
	check func(args []string) error
	// run runs the command.
	run runFunc
}

// command is one subcommand.
type command struct {
	name string
	args []string // positional argument names
	// optional is how many of the trailing args may be left out.
	optional int
	// argsText, when set, is how usage shows the arguments.
	argsText string
	summary  string
	details  string
	need     need
	// setup registers the command's flags and returns its runner.
	setup func(fs *flag.FlagSet) runner
}

// commands returns the command table, in the order usage lists them.
func commands() []command {
	return []command{
		infoCommand(),
		sessionsCommand(),
		logCommand(),
		tailCommand(),
		cursorsCommand(),
		deadCommand(),
		redriveCommand(),
		cancelCommand(),
		headCommand(),
		repairSessionCommand(),
		retentionCommand(),
		dropCommand(),
		presenceCommand(),
		workersCommand(),
		consumersCommand(),
		pauseCommand(false),
		pauseCommand(true),
		schedulesCommand(),
		ratesCommand(),
		readyCommand(),
		serveCommand(),
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// Run runs a2redis-inspect with args (without the program name) and returns
// the exit code: ExitOK, ExitError or ExitUsage. Cancelling ctx interrupts
// the command (tail -f ends cleanly with ExitOK).
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	a := &app{env: env, out: bufio.NewWriterSize(env.Stdout, 64<<10)}
	a.opts.urls.init(env.Getenv(EnvURL))
	a.opts.prefix = env.Getenv(EnvPrefix)
	if a.opts.prefix == "" {
		a.opts.prefix = redisstore.DefaultPrefix
	}
	a.opts.timeout = DefaultTimeout
	defer func() {
		if a.client != nil {
			a.client.Close()
		}
	}()
	code := a.run(ctx, args)
	if err := a.out.Flush(); err != nil && code == ExitOK {
		a.errorf("writing output: %v", err)
		code = ExitError
	}
	return code
}

func (a *app) run(ctx context.Context, args []string) int {
	top := newFlagSet(name)
	a.globalFlags(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(a.env.Stdout)
			return ExitOK
		}
		return a.usage(err.Error())
	}
	rest := top.Args()
	if len(rest) == 0 {
		writeUsage(a.env.Stderr)
		return ExitUsage
	}
	cmdName, rest := rest[0], rest[1:]
	if cmdName == "help" {
		return a.help(rest)
	}
	cmd, ok := findCommand(cmdName)
	if !ok {
		return a.usage(fmt.Sprintf("unknown command %q (commands: %s)", cmdName, strings.Join(commandNames(), ", ")))
	}
	fs := newFlagSet(name + " " + cmd.name)
	a.globalFlags(fs)
	runner := cmd.setup(fs)
	positional, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeCommandUsage(a.env.Stdout, cmd)
			return ExitOK
		}
		return a.commandUsage(cmd, err.Error())
	}
	if n := len(positional); n > len(cmd.args) || n < len(cmd.args)-cmd.optional {
		return a.commandUsage(cmd, fmt.Sprintf("%s takes %s argument(s) (%s), got %d", cmd.name, argCount(cmd), argsText(cmd), len(positional)))
	}
	for i, arg := range positional {
		if arg == "" {
			return a.commandUsage(cmd, fmt.Sprintf("%s is empty", cmd.args[i]))
		}
	}
	if err := a.checkOptions(); err != nil {
		return a.commandUsage(cmd, err.Error())
	}
	if runner.check != nil {
		if err := runner.check(positional); err != nil {
			return a.commandUsage(cmd, err.Error())
		}
	}
	if err := a.prepare(ctx, cmd.need, positional); err != nil {
		return a.fail(ctx, err)
	}
	if err := runner.run(ctx, a, positional); err != nil {
		return a.fail(ctx, err)
	}
	return ExitOK
}

func (a *app) globalFlags(fs *flag.FlagSet) {
	fs.Var(&a.opts.urls, "url", "")
	fs.StringVar(&a.opts.prefix, "prefix", a.opts.prefix, "")
	fs.DurationVar(&a.opts.timeout, "timeout", a.opts.timeout, "")
	fs.BoolVar(&a.opts.json, "json", a.opts.json, "")
}

func (a *app) help(args []string) int {
	switch len(args) {
	case 0:
		writeUsage(a.env.Stdout)
		return ExitOK
	case 1:
		if cmd, ok := findCommand(args[0]); ok {
			writeCommandUsage(a.env.Stdout, cmd)
			return ExitOK
		}
		if args[0] == "help" {
			writeUsage(a.env.Stdout)
			return ExitOK
		}
		return a.usage(fmt.Sprintf("unknown command %q (commands: %s)", args[0], strings.Join(commandNames(), ", ")))
	}
	return a.usage("help takes at most one command name")
}

// usage reports a command-line error and returns ExitUsage.
func (a *app) usage(msg string) int {
	fmt.Fprintf(a.env.Stderr, "%s: %s\nRun '%s help' for usage.\n", name, printable(oneLine(msg)), name)
	return ExitUsage
}

func (a *app) commandUsage(cmd command, msg string) int {
	fmt.Fprintf(a.env.Stderr, "%s: %s\nUsage: %s\nRun '%s help %s' for details.\n", name, printable(oneLine(msg)), synopsis(cmd), name, cmd.name)
	return ExitUsage
}

// fail reports err as one line on stderr and returns its exit code.
func (a *app) fail(ctx context.Context, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return a.usage(ue.msg)
	}
	if errors.Is(err, errInterrupted) || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		_ = a.out.Flush()
		a.errorf("interrupted")
		return ExitError
	}
	_ = a.out.Flush()
	a.errorf("%s", a.explain(err))
	return ExitError
}

func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.env.Stderr, "%s: %s\n", name, printable(oneLine(fmt.Sprintf(format, args...))))
}

// hint writes a line for people on stderr (never in JSON mode).
func (a *app) hint(format string, args ...any) {
	if !a.opts.json {
		fmt.Fprintf(a.env.Stderr, format+"\n", args...)
	}
}

// call returns a context bounded by --timeout for one Redis call.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.opts.timeout)
}

// usageError is a command-line mistake found after parsing (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

var errInterrupted = errors.New("interrupted")

func (a *app) checkOptions() error {
	if a.opts.timeout <= 0 {
		return errors.New("--timeout must be positive")
	}
	return nil
}

// commandNames lists the command names, for messages.
func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// argsText names a command's positional arguments, the optional ones in
// brackets.
func argsText(cmd command) string {
	if cmd.argsText != "" {
		return cmd.argsText
	}
	req := cmd.args[:len(cmd.args)-cmd.optional]
	text := strings.Join(req, " ")
	if cmd.optional > 0 {
		text = strings.TrimSpace(text + " [" + strings.Join(cmd.args[len(req):], " ") + "]")
	}
	return text
}

func argCount(cmd command) string {
	if cmd.optional == 0 {
		return fmt.Sprint(len(cmd.args))
	}
	return fmt.Sprintf("%d or %d", len(cmd.args)-cmd.optional, len(cmd.args))
}
