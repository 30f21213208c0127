package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/presence"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one run printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs commands against one server and prefix.
type cli struct {
	url    string
	prefix string
	clock  *redistest.Clock
	env    map[string]string
	// pageLimit, when positive, makes the listings' pages that small.
	pageLimit int
}

// run runs args after the global flags --url and --prefix.
func (c *cli) run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var global []string
	if c.url != "" {
		global = append(global, "--url", c.url)
	}
	if c.prefix != "" {
		global = append(global, "--prefix", c.prefix)
	}
	return c.runRaw(t, context.Background(), stdin, append(global, args...)...)
}

func (c *cli) runRaw(t *testing.T, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return c.env[k] }, pageLimit: c.pageLimit}
	if c.clock != nil {
		env.Now = c.clock.Now
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	code := Run(ctx, args, env)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// ok asserts a run succeeded and returns its stdout.
func (r result) ok(t *testing.T) string {
	t.Helper()
	require.Equal(t, ExitOK, r.code, "stderr: %s\nstdout: %s", r.stderr, r.stdout)
	return r.stdout
}

// failed asserts a run exited with code and a one-line error, and returns
// the error line.
func (r result) failed(t *testing.T, code int) string {
	t.Helper()
	require.Equal(t, code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.NotEmpty(t, r.stderr)
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	line := lines[0] // usage: the error, then how to get help
	if code == ExitError {
		line = lines[len(lines)-1] // after a prompt, if any
	}
	require.True(t, strings.HasPrefix(line, "a2redis-inspect: "), "stderr: %s", r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "a2redis-inspect: "), "one error line: %q", r.stderr)
	return line
}

// parseJSON decodes a run's stdout, which must be exactly one document, or,
// for the docs of list commands (fromLines), NDJSON: one object per line.
func parseJSON(t *testing.T, out string, v any) {
	t.Helper()
	if l, ok := v.(interface{ fromLines(*testing.T, []string) }); ok {
		var lines []string
		if out != "" {
			require.True(t, strings.HasSuffix(out, "\n"), "NDJSON ends with a newline: %q", out)
			lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		}
		for _, line := range lines {
			require.True(t, json.Valid([]byte(line)) && strings.HasPrefix(line, "{"), "one object per line: %q", line)
		}
		l.fromLines(t, lines)
		return
	}
	dec := json.NewDecoder(strings.NewReader(out))
	require.NoError(t, dec.Decode(v), "stdout: %s", out)
	var extra json.RawMessage
	require.Error(t, dec.Decode(&extra), "one JSON document expected: %s", out)
}

// parseTable splits a table into rows of cells keyed by the header, using
// the header's column starts.
func parseTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	header := []rune(lines[0])
	var starts []int
	var names []string
	for i, r := range header {
		if r != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
			end := i
			for end < len(header) && header[end] != ' ' {
				end++
			}
			names = append(names, string(header[i:end]))
		}
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		rs := []rune(line)
		row := map[string]string{}
		for k, start := range starts {
			end := len(rs)
			if k+1 < len(starts) {
				end = min(starts[k+1], len(rs))
			}
			if start > len(rs) {
				row[names[k]] = ""
				continue
			}
			row[names[k]] = strings.TrimSpace(string(rs[start:end]))
		}
		rows = append(rows, row)
	}
	return rows
}

// checkAligned asserts that every row of a table starts each column where
// the header does (a cell never shifts the next one).
func checkAligned(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := []rune(lines[0])
	for _, line := range lines[1:] {
		rs := []rune(line)
		for i, r := range header {
			if i > 0 && r != ' ' && header[i-1] == ' ' && i < len(rs) {
				require.True(t, rs[i-1] == ' ', "column at %d not aligned in %q", i, line)
			}
		}
		require.True(t, utf8.ValidString(line))
	}
}

// env is a store on its own prefix of a real server, with a CLI for it.
type env struct {
	ctx    context.Context
	client rueidis.Client
	store  *redisstore.Store
	clock  *redistest.Clock
	cli    *cli
}

func newEnv(t *testing.T, client rueidis.Client, urls ...string) *env {
	t.Helper()
	// Real time (ms resolution), so presence TTLs hold whatever the date.
	ck := redistest.NewClock(time.UnixMilli(time.Now().UnixMilli()))
	prefix := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Clock: ck.Now})
	require.NoError(t, err)
	return &env{ctx: ctx, client: client, store: store, clock: ck,
		cli: &cli{url: strings.Join(urls, ","), prefix: prefix, clock: ck}}
}

// serverEnv is an env on the shared redis-server.
func serverEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, redistest.Server(t), "redis://"+redistest.ServerAddr(t))
}

// The scenario: consumers and sessions every command test reads.
var (
	mailer = a2redis.Consumer{Name: "mailer"}
	biller = a2redis.Consumer{Name: "biller"}
	audit  = a2redis.Consumer{Name: "audit", Log: &a2redis.LogSpec{Lane: "all"}}
	served = []a2redis.Consumer{mailer, biller, audit}
)

const (
	orderSession = "order-1"
	quietSession = "order-2"
	oddSession   = "odd \"id\" {x} *?[]\\ é\n"
	declined     = "card declined\nretry later"
)

// buildScenario writes, through the store:
//   - order-1: 1 order.created for mailer (event cursor) and biller (lane
//     "billing"), 2 order.paid for biller; the audit log cursor takes every
//     type. A claim takes mailer@1, biller/billing@1 and audit/all@1;
//     audit completes returning 3 audit.noted; biller fails at
//     MaxFailures 1 (dead letter); mailer stays claimed. Presence: alice.
//   - order-2: 3 events without consumers.
//   - an id full of quotes, braces, glob characters, é and a newline.
func buildScenario(t *testing.T, e *env) {
	t.Helper()
	_, err := e.store.Append(e.ctx, orderSession, []a2redis.Event{
		{ID: "created-1", Type: "order.created", Payload: json.RawMessage(`{"id": 1, "items": ["a", "b"]}`),
			Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "biller", Lane: "billing"}}},
		{ID: "paid-1", Type: "order.paid", Payload: json.RawMessage(`{"amount":"<42> & more"}`),
			Targets: []a2redis.Target{{Consumer: "biller", Lane: "billing"}}},
	}, redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)

	claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: orderSession, Holder: "worker-7", TTL: time.Minute, Consumers: served})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 3)
	heads := map[string]a2redis.HeadEvent{}
	for _, h := range claim.Heads {
		heads[h.Consumer] = h
	}
	done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: orderSession, Head: heads["audit"].Ref(), Attempt: heads["audit"].Attempts,
		Events: []a2redis.Event{{ID: "noted-1", Type: "audit.noted", Payload: json.RawMessage(`{"ok":true}`)}}, Consumers: served})
	require.NoError(t, err)
	require.Equal(t, redisstore.Completed, done.Outcome)
	fail, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: orderSession, Head: heads["biller"].Ref(), Attempt: heads["biller"].Attempts, Error: declined, MaxFailures: 1})
	require.NoError(t, err)
	require.Equal(t, redisstore.DeadLettered, fail.Outcome)

	_, err = presence.New(e.store).Set(e.ctx, orderSession, "alice", map[string]json.RawMessage{"cursor": json.RawMessage(`{"line":3}`)},
		presence.Meta{Seen: 4, At: e.clock.Now(), TTL: time.Hour})
	require.NoError(t, err)

	_, err = e.store.Append(e.ctx, quietSession, []a2redis.Event{{Type: "note"}, {Type: "note"}, {Type: "note"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	_, err = e.store.Append(e.ctx, oddSession, []a2redis.Event{{ID: "esc\x1b[2J", Type: "odd", Payload: json.RawMessage(`"\u001b[31mred"`)}}, redisstore.AppendOptions{})
	require.NoError(t, err)
}

// pipe returns a pipe whose reader blocks until the test ends.
func pipe(t *testing.T) (*io.PipeReader, *io.PipeWriter) {
	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	return r, w
}

// helloServer is the name the server at addr gives itself in its HELLO
// reply ("redis" for Redis, "valkey" for Valkey): what info must print for
// it, learnt another way than info learns it (INFO server).
func helloServer(t *testing.T, addr string) string {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	hello, err := c.Do(t.Context(), c.B().Hello().Protover(3).Build()).AsMap()
	require.NoError(t, err)
	server := hello["server"]
	name, err := server.ToString()
	require.NoError(t, err)
	require.NotEmpty(t, name)
	return name
}
