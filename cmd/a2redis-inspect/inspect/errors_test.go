package inspect

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/keys"
)

// passwordServer spawns a private server and turns on requirepass.
// (redistest.SpawnServer(t, "--requirepass", …) cannot be used: its
// readiness PING is sent without AUTH.)
func passwordServer(t *testing.T, password string) string {
	t.Helper()
	in := redistest.SpawnServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{in.Addr()}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Do(context.Background(), c.B().ConfigSet().ParameterValue().ParameterValue("requirepass", password).Build()).Error())
	return in.Addr()
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestWrongPassword(t *testing.T) {
	t.Parallel()
	addr := passwordServer(t, "secret")
	for _, cmd := range [][]string{{"info"}, {"sessions"}, {"log", "s"}} {
		line := (&cli{url: "redis://:wrong@" + addr}).run(t, "", cmd...).failed(t, ExitError)
		assert.Contains(t, line, "authentication failed at "+addr+": wrong user name or password (WRONGPASS)")
		assert.Contains(t, line, "--url")
		assert.NotContains(t, line, "wrong@", "the password is never printed")

		line = (&cli{url: "redis://" + addr}).run(t, "", cmd...).failed(t, ExitError)
		assert.Contains(t, line, "Redis at "+addr+" requires a password: put it in the URL, e.g. redis://:PASSWORD@"+addr)
	}
	// The right password works, as user:password too.
	var doc infoDoc
	parseJSON(t, (&cli{url: "redis://:secret@" + addr}).run(t, "", "info", "--json").ok(t), &doc)
	assert.Nil(t, doc.Layout)
	(&cli{url: "redis://default:secret@" + addr}).run(t, "", "info").ok(t)
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	started := time.Now()
	for _, url := range []string{"redis://" + addr, addr} {
		line := (&cli{url: url}).run(t, "", "sessions").failed(t, ExitError)
		assert.Equal(t, "a2redis-inspect: cannot reach Redis at "+addr+": connection refused; check --url (or A2REDIS_URL) and that the server is up", line)
	}
	assert.Less(t, time.Since(started), 10*time.Second)
}

func TestSeveralURLsOnAStandaloneServer(t *testing.T) {
	t.Parallel()
	addr := redistest.ServerAddr(t)
	line := (&cli{}).run(t, "", "info", "--url", "redis://"+addr, "--url", addr).failed(t, ExitError)
	assert.Equal(t, "a2redis-inspect: --url names 2 servers ("+addr+","+addr+"), but they are not Redis Cluster nodes: give a single --url for a standalone server", line)
}

func TestOtherLayout(t *testing.T) {
	t.Parallel()
	client := redistest.Server(t)
	prefix := redistest.Prefix(t)
	require.NoError(t, client.Do(t.Context(), client.B().Set().Key(keys.Schema(prefix)).Value("tagged-0").Build()).Error())
	c := &cli{url: "redis://" + redistest.ServerAddr(t), prefix: prefix}
	want := `a2redis-inspect: prefix "` + prefix + `" holds key layout "tagged-0", but this a2redis-inspect reads "a2redis-1": use the a2redis-inspect of the a2redis release that wrote it, or check --prefix`
	for _, cmd := range [][]string{{"sessions"}, {"log", "s"}, {"cursors", "s"}, {"redrive", "s", "c", "1", "--retry", "--yes"}} {
		assert.Equal(t, want, c.run(t, "", cmd...).failed(t, ExitError), "%v", cmd)
	}
	r := c.run(t, "", "info")
	assert.Equal(t, want, r.failed(t, ExitError))
	assert.Contains(t, r.stdout, `tagged-0 (NOT supported: this a2redis-inspect reads a2redis-1)`, "info still shows what it found")
	found, err := client.Do(t.Context(), client.B().Get().Key(keys.Schema(prefix)).Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "tagged-0", found)
}

func TestMissingPrefixIsNotCreated(t *testing.T) {
	t.Parallel()
	client := redistest.Server(t)
	prefix := redistest.Prefix(t)
	c := &cli{url: "redis://" + redistest.ServerAddr(t), prefix: prefix}
	want := `a2redis-inspect: no a2redis data under prefix "` + prefix + `" (key ` + keys.Schema(prefix) + ` does not exist): check --prefix or A2REDIS_PREFIX`
	for _, cmd := range [][]string{{"log", "s"}, {"tail", "s"}, {"cursors", "s"}, {"dead", "s"}, {"presence", "s"}, {"redrive", "s", "c", "1", "--retry", "--yes"}} {
		assert.Equal(t, want, c.run(t, "", cmd...).failed(t, ExitError), "%v", cmd)
	}
	// The prefix-wide commands answer instead: info with layout none,
	// sessions with no sessions, both exit 0.
	var doc infoDoc
	parseJSON(t, c.run(t, "", "info", "--json").ok(t), &doc)
	assert.Nil(t, doc.Layout)
	assert.False(t, doc.LayoutSupported)
	assert.Contains(t, c.run(t, "", "info").ok(t), "layout       none: no a2redis data under this prefix")
	r := c.run(t, "", "sessions")
	assert.Equal(t, "no sessions under prefix \""+prefix+"\"\n", r.ok(t))
	assert.Equal(t, "(no a2redis data under prefix \""+prefix+"\" (key "+keys.Schema(prefix)+" does not exist): check --prefix or A2REDIS_PREFIX)\n", r.stderr)
	var sessions sessionsDoc
	parseJSON(t, c.run(t, "", "sessions", "--json").ok(t), &sessions)
	assert.Empty(t, sessions.Sessions, "no sessions: no lines")

	var cursor uint64
	for {
		entry, err := client.Do(t.Context(), client.B().Scan().Cursor(cursor).Match(keys.EscapeGlob(prefix)+"*").Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		assert.Empty(t, entry.Elements, "read commands wrote nothing under the prefix")
		if cursor = entry.Cursor; cursor == 0 {
			break
		}
	}
}

func TestUnknownSession(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	appendTypes(t, e, "known", "t")
	for _, cmd := range []string{"log", "tail", "cursors", "dead"} {
		line := e.cli.run(t, "", cmd, "unknown").failed(t, ExitError)
		assert.Equal(t, `a2redis-inspect: no session "unknown" under prefix "`+e.cli.prefix+`" (its log key does not exist): list them with 'a2redis-inspect sessions'`, line)
	}
	line := e.cli.run(t, "", "redrive", "known", "c", "1", "--retry").failed(t, ExitError)
	assert.Contains(t, line, `consumer "c" has no dead-lettered head at index 1 in session "known"`)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	// A listener that accepts and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	started := time.Now()
	r := (&cli{url: "redis://" + l.Addr().String()}).run(t, "", "info", "--timeout", "300ms")
	line := r.failed(t, ExitError)
	assert.Less(t, time.Since(started), 5*time.Second, "--timeout bounds the connection")
	assert.Contains(t, line, l.Addr().String())
	t.Log(line)
}

func TestUsage(t *testing.T) {
	t.Parallel()
	c := &cli{}
	r := c.runRaw(t, t.Context(), "")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "Commands:")

	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		out := c.runRaw(t, t.Context(), "", args...).ok(t)
		for _, cmd := range commands() {
			assert.Contains(t, out, "\n  "+strings.TrimSpace(cmd.name+" "+argsText(cmd))+"  ", "%v lists %s", args, cmd.name)
			assert.Contains(t, out, cmd.summary)
		}
		assert.Contains(t, out, "Exit codes:")
		assert.Contains(t, out, "--json")
	}
	for _, cmd := range commands() {
		for _, args := range [][]string{{"help", cmd.name}, {cmd.name, "-h"}, {cmd.name, "--help"}} {
			out := c.runRaw(t, t.Context(), "", args...).ok(t)
			assert.True(t, strings.HasPrefix(out, "Usage: a2redis-inspect "+cmd.name), "%v: %s", args, out)
			assert.Contains(t, out, "JSON: {", "%s documents its JSON fields", cmd.name)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" (commands: info, sessions, log`},
		{[]string{"help", "bogus"}, `unknown command "bogus"`},
		{[]string{"log"}, "log takes 1 argument(s) (SESSION), got 0"},
		{[]string{"log", "a", "b"}, "log takes 1 argument(s) (SESSION), got 2"},
		{[]string{"log", ""}, "SESSION is empty"},
		{[]string{"log", "s", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"log", "s", "--after", "x"}, `invalid value "x" for flag -after`},
		{[]string{"log", "s", "--after", "-1"}, "must not be negative"},
		{[]string{"tail", "s", "-n", "-1"}, "-n must not be negative"},
		{[]string{"sessions", "--match", "[abc"}, "unterminated [ class"},
		{[]string{"sessions", "--limit", "-2"}, "--limit must not be negative"},
		{[]string{"info", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"info", "--prefix", "a{b"}, "--prefix \"a{b\": it must be non-empty and must not contain braces"},
		{[]string{"info", "--url", "http://x"}, `scheme "http": use redis:// or rediss:// (TLS)`},
		{[]string{"info", "--url", "redis://h:1?skip_verify=true"}, "skip_verify needs a rediss:// (TLS) URL"},
		{[]string{"info", "--url", "rediss://h:1?skip_verify=maybe"}, `skip_verify="maybe" is not true or false`},
		{[]string{"info", "--url", "redis://:a@h:1,redis://:b@h:2"}, "every URL of a cluster must use the same scheme, user, password"},
		{[]string{"--bogus", "info"}, "flag provided but not defined: -bogus"},
	} {
		r := c.runRaw(t, t.Context(), "", tc.args...)
		line := r.failed(t, ExitUsage)
		assert.Contains(t, line, tc.want, "%v", tc.args)
		assert.NotContains(t, r.stderr, ":b@", "passwords are redacted")
	}
}

func TestURLOptions(t *testing.T) {
	t.Parallel()
	opt, err := clientOption([]string{"rediss://u:p@h1:7000/2?skip_verify=true"})
	require.NoError(t, err)
	assert.Equal(t, []string{"h1:7000"}, opt.InitAddress)
	assert.Equal(t, "u", opt.Username)
	assert.Equal(t, "p", opt.Password)
	assert.Equal(t, 2, opt.SelectDB)
	require.NotNil(t, opt.TLSConfig)
	assert.True(t, opt.TLSConfig.InsecureSkipVerify)
	assert.Equal(t, "h1", opt.TLSConfig.ServerName)
	assert.True(t, opt.DisableCache)

	opt, err = clientOption([]string{"rediss://h1:7000?skip_verify=false"})
	require.NoError(t, err)
	assert.False(t, opt.TLSConfig.InsecureSkipVerify)
	opt, err = clientOption([]string{"rediss://h1:7000?skip_verify"})
	require.NoError(t, err)
	assert.True(t, opt.TLSConfig.InsecureSkipVerify)

	opt, err = clientOption([]string{"h1:7000", "redis://h2:7001", "h3"})
	require.NoError(t, err)
	assert.Equal(t, []string{"h1:7000", "h2:7001", "h3:6379"}, opt.InitAddress)
	assert.Nil(t, opt.TLSConfig)

	var u urlList
	u.init("redis://env:1, redis://env:2")
	assert.Equal(t, []string{"redis://env:1", "redis://env:2"}, u.list())
	require.NoError(t, u.Set("a:1,b:2"))
	require.NoError(t, u.Set("c:3"))
	assert.Equal(t, []string{"a:1", "b:2", "c:3"}, u.list(), "flags replace the environment, and add up")
	var none urlList
	none.init("")
	assert.Equal(t, []string{DefaultURL}, none.list())

	assert.Equal(t, "redis://u:xxxxx@h:1", redact("redis://u:secret@h:1"))
	assert.Equal(t, "redis://h:1", redact("redis://h:1"))
}

func TestInterspersedFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		pos  []string
		raw  bool
		n    string
	}{
		{[]string{"s", "--raw"}, []string{"s"}, true, ""},
		{[]string{"--raw", "s", "--n", "3"}, []string{"s"}, true, "3"},
		{[]string{"--", "-weird", "--raw"}, []string{"-weird", "--raw"}, false, ""},
		{[]string{"a", "--n", "--", "b"}, []string{"a", "b"}, false, "--"},
		{[]string{"a", "--raw", "--", "--b"}, []string{"a", "--b"}, true, ""},
	} {
		fs := newFlagSet("t")
		raw := fs.Bool("raw", false, "")
		n := fs.String("n", "", "")
		pos, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.pos, pos, "%v", tc.args)
		assert.Equal(t, tc.raw, *raw, "%v", tc.args)
		assert.Equal(t, tc.n, *n, "%v", tc.args)
	}
}
