package inspect

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// Shapes of the JSON documents, as scripts would read them.
type (
	eventDoc struct {
		Index     int64           `json:"index"`
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		CreatedAt *string         `json:"created_at"`
		Cause     *causeJSON      `json:"cause"`
		Payload   json.RawMessage `json:"payload"`
	}
	// The list commands print NDJSON: these gather the lines.
	eventsDoc struct {
		Events []eventDoc
	}
	sessionsDoc struct {
		Sessions []sessionJSON
	}
	cursorDoc struct {
		Session        string  `json:"session"`
		Consumer       string  `json:"consumer"`
		Kind           string  `json:"kind"`
		Lane           string  `json:"lane"`
		Position       int64   `json:"position"`
		Head           int64   `json:"head"`
		Lag            int64   `json:"lag"`
		State          string  `json:"state"`
		Attempts       int64   `json:"attempts"`
		Failures       int64   `json:"failures"`
		Holder         string  `json:"holder"`
		ClaimExpiresAt *string `json:"claim_expires_at"`
		LastError      string  `json:"last_error"`
		DeadLettered   bool    `json:"dead_lettered"`
		DeadLetteredAt *string `json:"dead_lettered_at"`
	}
	cursorsDoc struct {
		Cursors []cursorDoc
	}
	deadLineDoc struct {
		Session        string          `json:"session"`
		Consumer       string          `json:"consumer"`
		Kind           string          `json:"kind"`
		Lane           string          `json:"lane"`
		Index          int64           `json:"index"`
		EventID        string          `json:"event_id"`
		Type           string          `json:"type"`
		Failures       int64           `json:"failures"`
		LastError      string          `json:"last_error"`
		DeadLetteredAt *string         `json:"dead_lettered_at"`
		Payload        json.RawMessage `json:"payload"`
	}
	deadDoc struct {
		DeadLetters []deadLineDoc
	}
	presenceLineDoc struct {
		Session     string          `json:"session"`
		Participant string          `json:"participant"`
		Field       string          `json:"field"`
		Value       json.RawMessage `json:"value"`
		Seen        int64           `json:"seen"`
		At          *string         `json:"at"`
		ExpiresAt   *string         `json:"expires_at"`
	}
	presenceDoc struct {
		Presence []presenceLineDoc
	}
	infoDoc struct {
		Prefix          string  `json:"prefix"`
		Layout          *string `json:"layout"`
		LayoutSupported bool    `json:"layout_supported"`
		KeyLocking      string  `json:"key_locking"`
		Mode            string  `json:"mode"`
		Nodes           []struct {
			Addr    string `json:"addr"`
			Server  string `json:"server"`
			Version string `json:"version"`
			Role    string `json:"role"`
			Error   string `json:"error"`
		} `json:"nodes"`
	}
)

func (d *eventsDoc) fromLines(t *testing.T, lines []string) {
	d.Events = decodeLines[eventDoc](t, lines)
}
func (d *sessionsDoc) fromLines(t *testing.T, lines []string) {
	d.Sessions = decodeLines[sessionJSON](t, lines)
}
func (d *cursorsDoc) fromLines(t *testing.T, lines []string) {
	d.Cursors = decodeLines[cursorDoc](t, lines)
}
func (d *deadDoc) fromLines(t *testing.T, lines []string) {
	d.DeadLetters = decodeLines[deadLineDoc](t, lines)
}
func (d *presenceDoc) fromLines(t *testing.T, lines []string) {
	d.Presence = decodeLines[presenceLineDoc](t, lines)
}

func decodeLines[T any](t *testing.T, lines []string) []T {
	t.Helper()
	var out []T
	for _, line := range lines {
		var v T
		require.NoError(t, json.Unmarshal([]byte(line), &v), "line: %s", line)
		out = append(out, v)
	}
	return out
}

func rfc3339(t *testing.T, s *string) time.Time {
	t.Helper()
	require.NotNil(t, s)
	require.True(t, strings.HasSuffix(*s, "Z"), "UTC: %s", *s)
	v, err := time.Parse(time.RFC3339, *s)
	require.NoError(t, err)
	return v
}

func byKey(rows []map[string]string, key string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, r := range rows {
		out[r[key]] = r
	}
	return out
}

func TestCommands(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	buildScenario(t, e)
	c := e.cli
	start := e.clock.Now().UTC()

	t.Run("info", func(t *testing.T) {
		out := c.run(t, "", "info").ok(t)
		assert.Contains(t, out, "layout       a2redis-1 (supported)")
		assert.Contains(t, out, "key locking  no: ")
		assert.Contains(t, out, "mode         standalone")
		nodes := parseTable(t, out[strings.Index(out, "NODE"):])
		require.Len(t, nodes, 1)
		server := helloServer(t, redisAddr(c.url))
		assert.Equal(t, server, nodes[0]["SERVER"])
		assert.Equal(t, "master", nodes[0]["ROLE"])
		assert.NotEmpty(t, nodes[0]["VERSION"])

		var doc infoDoc
		parseJSON(t, c.run(t, "", "info", "--json").ok(t), &doc)
		assert.Equal(t, c.prefix, doc.Prefix)
		require.NotNil(t, doc.Layout)
		assert.Equal(t, keys.Layout, *doc.Layout)
		assert.True(t, doc.LayoutSupported)
		assert.Equal(t, lockingNo, doc.KeyLocking)
		assert.Equal(t, "standalone", doc.Mode, "a single URL on a standalone server falls back to a single client")
		require.Len(t, doc.Nodes, 1)
		assert.Equal(t, redisAddr(c.url), doc.Nodes[0].Addr)
		assert.Equal(t, server, doc.Nodes[0].Server)
		assert.Empty(t, doc.Nodes[0].Error)
	})

	t.Run("sessions", func(t *testing.T) {
		out := c.run(t, "", "sessions").ok(t)
		checkAligned(t, out)
		rows := byKey(parseTable(t, out), "SESSION")
		require.Len(t, rows, 3)
		assert.Equal(t, map[string]string{"SESSION": orderSession, "HEAD": "3", "CLEAR": "0", "RUNNABLE": "2", "DEAD": "1"}, rows[orderSession])
		assert.Equal(t, "3", rows[quietSession]["HEAD"])
		require.Contains(t, rows, cell(oddSession), "an id with quotes, braces and a newline prints escaped")
		assert.NotContains(t, out, "\x1b")
		// Sorted, and aligned however the SCAN pages fall (other data on
		// the server spreads the prefix's keys over many pages).
		tiny := *c
		tiny.pageLimit = 1
		out = tiny.run(t, "", "sessions").ok(t)
		checkAligned(t, out)
		var order []string
		for _, r := range parseTable(t, out) {
			order = append(order, r["SESSION"])
		}
		assert.Equal(t, []string{cell(oddSession), orderSession, quietSession}, order)

		var doc sessionsDoc
		parseJSON(t, c.run(t, "", "sessions", "--json").ok(t), &doc)
		assert.Len(t, doc.Sessions, 3)
		got := map[string]sessionJSON{}
		for _, s := range doc.Sessions {
			got[s.Session] = s
		}
		assert.Equal(t, sessionJSON{Session: orderSession, Head: 3, Runnable: 2, DeadLettered: 1}, got[orderSession])
		assert.Equal(t, sessionJSON{Session: quietSession, Head: 3}, got[quietSession])
		assert.Equal(t, sessionJSON{Session: oddSession, Head: 1}, got[oddSession], "the exact id survives the key round trip")

		for _, tc := range []struct {
			match string
			want  []string
		}{
			{"order-*", []string{orderSession, quietSession}}, // pushed into SCAN MATCH
			{"order-?", []string{orderSession, quietSession}}, // matched by the client
			{"order-[2-9]", []string{quietSession}},
			{"odd*", []string{oddSession}},
			{`*"id"*`, []string{oddSession}},
			{`*\*\?\[\]\\*`, []string{oddSession}},
			{"nothing*", nil},
		} {
			var doc sessionsDoc
			parseJSON(t, c.run(t, "", "sessions", "--json", "--match", tc.match).ok(t), &doc)
			var names []string
			for _, s := range doc.Sessions {
				names = append(names, s.Session)
			}
			sort.Strings(names)
			assert.Equal(t, tc.want, names, "--match %s", tc.match)
		}
		assert.Equal(t, "no sessions matching \"nothing*\" under prefix \""+c.prefix+"\"\n", c.run(t, "", "sessions", "--match", "nothing*").ok(t))

		var limited sessionsDoc
		lr := c.run(t, "", "sessions", "--json", "--limit", "2")
		parseJSON(t, lr.ok(t), &limited)
		assert.Len(t, limited.Sessions, 2)
		assert.Contains(t, lr.stderr, "stopped at --limit 2", "stderr says the list was cut, in JSON mode too")
		r := c.run(t, "", "sessions", "--limit", "1")
		assert.Len(t, parseTable(t, r.ok(t)), 1)
		assert.Contains(t, r.stderr, "--limit 1")
	})

	t.Run("log", func(t *testing.T) {
		out := c.run(t, "", "log", orderSession).ok(t)
		checkAligned(t, out)
		rows := parseTable(t, out)
		require.Len(t, rows, 3)
		assert.Equal(t, map[string]string{"INDEX": "1", "ID": "created-1", "TYPE": "order.created", "CREATED": formatTime(start), "CAUSE": "-",
			"PAYLOAD": `{"id":1,"items":["a","b"]}`}, rows[0])
		assert.Equal(t, "audit/all@1#1", rows[2]["CAUSE"])
		assert.Equal(t, `{"amount":"<42> & more"}`, rows[1]["PAYLOAD"])

		raw := parseTable(t, c.run(t, "", "log", orderSession, "--raw").ok(t))
		assert.Equal(t, `{"id": 1, "items": ["a", "b"]}`, raw[0]["PAYLOAD"], "--raw prints the payload as stored")

		var doc eventsDoc
		parseJSON(t, c.run(t, "", "--json", "log", orderSession).ok(t), &doc)
		require.Len(t, doc.Events, 3)
		assert.Equal(t, start, rfc3339(t, doc.Events[0].CreatedAt))
		assert.JSONEq(t, `{"id":1,"items":["a","b"]}`, string(doc.Events[0].Payload))
		assert.Nil(t, doc.Events[0].Cause)
		assert.Equal(t, &causeJSON{Consumer: "audit", Lane: "all", Index: 1, Attempt: 1}, doc.Events[2].Cause)

		indexes := func(args ...string) []int64 {
			var doc eventsDoc
			parseJSON(t, c.run(t, "", append([]string{"log", orderSession, "--json"}, args...)...).ok(t), &doc)
			var out []int64
			for _, e := range doc.Events {
				out = append(out, e.Index)
			}
			return out
		}
		assert.Equal(t, []int64{2}, indexes("--after", "1", "--through", "2"))
		assert.Equal(t, []int64{1, 2}, indexes("--limit", "2"))
		assert.Equal(t, []int64{3}, indexes("--type", "audit.noted"))
		assert.Equal(t, []int64{2, 3}, indexes("--type", "audit.noted", "--type", "order.paid"))
		assert.Equal(t, []int64{2, 3}, indexes("--type", "audit.noted,order.paid"))
		assert.Nil(t, indexes("--after", "3"))

		odd := c.run(t, "", "log", "--", oddSession).ok(t)
		assert.NotContains(t, odd, "\x1b", "no terminal escape reaches the output")
		rows = parseTable(t, odd)
		require.Len(t, rows, 1)
		assert.Equal(t, `esc\x1b[2J`, rows[0]["ID"])
		assert.Equal(t, "no events in session \"order-1\" match\n", c.run(t, "", "log", orderSession, "--after", "3").ok(t))
	})

	t.Run("tail", func(t *testing.T) {
		rows := parseTable(t, c.run(t, "", "tail", orderSession, "-n", "2").ok(t))
		require.Len(t, rows, 2)
		assert.Equal(t, "2", rows[0]["INDEX"])
		assert.Equal(t, "3", rows[1]["INDEX"])
		var doc eventsDoc
		parseJSON(t, c.run(t, "", "tail", "-n", "1", "--json", orderSession).ok(t), &doc)
		require.Len(t, doc.Events, 1)
		assert.Equal(t, "noted-1", doc.Events[0].ID)
		assert.Len(t, parseTable(t, c.run(t, "", "tail", orderSession, "-n", "5000").ok(t)), 3, "beyond 1000 the tail is streamed")
		assert.Len(t, parseTable(t, c.run(t, "", "tail", orderSession).ok(t)), 3)
	})

	t.Run("cursors", func(t *testing.T) {
		out := c.run(t, "", "cursors", orderSession)
		checkAligned(t, out.ok(t))
		rows := byKey(parseTable(t, out.stdout), "CONSUMER")
		require.Len(t, rows, 3)
		assert.Equal(t, map[string]string{"CONSUMER": "audit", "KIND": "log", "LANE": "all", "POSITION": "1", "HEAD": "2", "LAG": "2",
			"STATE": "ready", "ATTEMPTS": "0", "FAILURES": "0", "HOLDER": "-", "CLAIM_EXPIRES": "-", "DEAD_LETTERED": "-", "LAST_ERROR": "-"}, rows["audit"])
		assert.Equal(t, map[string]string{"CONSUMER": "biller", "KIND": "lane", "LANE": "billing", "POSITION": "0", "HEAD": "1", "LAG": "3",
			"STATE": "dead", "ATTEMPTS": "1", "FAILURES": "1", "HOLDER": "-", "CLAIM_EXPIRES": "-", "DEAD_LETTERED": formatTime(start),
			"LAST_ERROR": `card declined\nretry later`}, rows["biller"])
		assert.Equal(t, map[string]string{"CONSUMER": "mailer", "KIND": "event", "LANE": "-", "POSITION": "0", "HEAD": "1", "LAG": "3",
			"STATE": "claimed", "ATTEMPTS": "1", "FAILURES": "0", "HOLDER": "worker-7", "CLAIM_EXPIRES": formatTime(start.Add(time.Minute)),
			"DEAD_LETTERED": "-", "LAST_ERROR": "-"}, rows["mailer"])
		assert.Contains(t, out.stderr, "a2redis-inspect dead order-1")

		var doc cursorsDoc
		parseJSON(t, c.run(t, "", "cursors", orderSession, "--json").ok(t), &doc)
		require.Len(t, doc.Cursors, 3)
		for _, c := range doc.Cursors {
			assert.Equal(t, orderSession, c.Session)
		}
		b := doc.Cursors[1]
		assert.Equal(t, "biller", b.Consumer)
		assert.True(t, b.DeadLettered)
		assert.Equal(t, declined, b.LastError)
		assert.Equal(t, start, rfc3339(t, b.DeadLetteredAt))
		m := doc.Cursors[2]
		assert.Equal(t, cursorDoc{Session: orderSession, Consumer: "mailer", Kind: "event", Position: 0, Head: 1, Lag: 3, State: stateClaimed, Attempts: 1, Holder: "worker-7",
			ClaimExpiresAt: m.ClaimExpiresAt}, m)
		assert.Equal(t, start.Add(time.Minute), rfc3339(t, m.ClaimExpiresAt))
		assert.Nil(t, doc.Cursors[0].ClaimExpiresAt, "unset times are null")
	})

	t.Run("dead", func(t *testing.T) {
		out := c.run(t, "", "dead", orderSession)
		rows := parseTable(t, out.ok(t))
		require.Len(t, rows, 1)
		assert.Equal(t, map[string]string{"CONSUMER": "biller", "KIND": "lane", "LANE": "billing", "INDEX": "1", "TYPE": "order.created",
			"ATTEMPTS": "1", "FAILURES": "1", "DEAD_LETTERED": formatTime(start), "LAST_ERROR": `card declined\nretry later`}, rows[0])
		assert.Contains(t, out.stderr, "a2redis-inspect redrive order-1 biller 1 --retry")

		var doc deadDoc
		parseJSON(t, c.run(t, "", "dead", orderSession, "--json").ok(t), &doc)
		require.Len(t, doc.DeadLetters, 1)
		d := doc.DeadLetters[0]
		assert.Equal(t, "created-1", d.EventID)
		assert.Equal(t, declined, d.LastError)
		assert.Equal(t, "billing", d.Lane)
		assert.JSONEq(t, `{"id":1,"items":["a","b"]}`, string(d.Payload))
		assert.Equal(t, "no dead-lettered heads in session \"order-2\"\n", c.run(t, "", "dead", quietSession).ok(t))
		parseJSON(t, c.run(t, "", "dead", quietSession, "--json").ok(t), &doc)
		assert.Empty(t, doc.DeadLetters)
	})

	t.Run("presence", func(t *testing.T) {
		rows := parseTable(t, c.run(t, "", "presence", orderSession).ok(t))
		require.Len(t, rows, 1)
		assert.Equal(t, map[string]string{"PARTICIPANT": "alice", "FIELD": "cursor", "SEEN": "4", "AT": formatTime(start),
			"EXPIRES": formatTime(start.Add(time.Hour)), "VALUE": `{"line":3}`}, rows[0])
		var doc presenceDoc
		parseJSON(t, c.run(t, "", "presence", orderSession, "--json").ok(t), &doc)
		require.Len(t, doc.Presence, 1)
		assert.JSONEq(t, `{"line":3}`, string(doc.Presence[0].Value))
		assert.Equal(t, start.Add(time.Hour), rfc3339(t, doc.Presence[0].ExpiresAt))
		assert.Equal(t, "nobody is present in session \"order-2\"\n", c.run(t, "", "presence", quietSession).ok(t))
	})

	t.Run("environment", func(t *testing.T) {
		env := &cli{clock: e.clock, env: map[string]string{EnvURL: c.url, EnvPrefix: c.prefix}}
		assert.Len(t, parseTable(t, env.run(t, "", "log", orderSession).ok(t)), 3, "A2REDIS_URL and A2REDIS_PREFIX are the defaults")
		wrong := &cli{clock: e.clock, env: map[string]string{EnvURL: "redis://127.0.0.1:1", EnvPrefix: "elsewhere"}}
		out := wrong.runRaw(t, t.Context(), "", "log", orderSession, "--url", c.url, "--prefix", c.prefix).ok(t)
		assert.Len(t, parseTable(t, out), 3, "flags override the environment")
	})

	t.Run("orphaned", func(t *testing.T) {
		// worker-7 holds mailer's head; registered, it is claimed, and
		// orphaned once its record expired without a deregistration.
		require.NoError(t, workerreg.Of(e.store).Register(e.ctx, redisstore.WorkerInfo{ID: "worker-7"}, time.Second))
		rows := byKey(parseTable(t, c.run(t, "", "cursors", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, stateClaimed, rows["mailer"]["STATE"], "a live worker's claim")
		e.clock.Advance(2 * time.Second)
		rows = byKey(parseTable(t, c.run(t, "", "cursors", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, stateOrphaned, rows["mailer"]["STATE"], "the claim of a worker whose heartbeat stopped")
		assert.Equal(t, "worker-7", rows["mailer"]["HOLDER"])
		var doc cursorsDoc
		parseJSON(t, c.run(t, "", "cursors", orderSession, "--json").ok(t), &doc)
		for _, cur := range doc.Cursors {
			if cur.Consumer == "mailer" {
				assert.Equal(t, stateOrphaned, cur.State)
			}
		}
		require.NoError(t, workerreg.Of(e.store).Deregister(e.ctx, "worker-7"))
		rows = byKey(parseTable(t, c.run(t, "", "cursors", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, stateClaimed, rows["mailer"]["STATE"], "a holder the registry does not know (deregistered, or never registered) is claimed")
	})

	t.Run("lapsed", func(t *testing.T) {
		e.clock.Advance(2 * time.Minute)
		rows := byKey(parseTable(t, c.run(t, "", "cursors", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, stateLapsed, rows["mailer"]["STATE"], "an expired claim shows as lapsed")

		// The takeover spends the last attempt and says why, in dead and
		// cursors.
		taken, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: orderSession, Holder: "worker-8", TTL: time.Minute, MaxFailures: 1, Consumers: []a2redis.Consumer{{Name: "mailer"}}})
		require.NoError(t, err)
		require.Len(t, taken.DeadLettered, 1)
		why := "lease expired: held by worker-7 until " + start.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z") +
			", taken over by worker-8 at " + e.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z")
		dead := byKey(parseTable(t, c.run(t, "", "dead", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, "1", dead["mailer"]["FAILURES"])
		assert.Equal(t, why, dead["mailer"]["LAST_ERROR"])
		rows = byKey(parseTable(t, c.run(t, "", "cursors", orderSession).ok(t)), "CONSUMER")
		assert.Equal(t, stateDead, rows["mailer"]["STATE"])
		var doc cursorsDoc
		parseJSON(t, c.run(t, "", "cursors", orderSession, "--json").ok(t), &doc)
		for _, cur := range doc.Cursors {
			if cur.Consumer == "mailer" {
				assert.Equal(t, why, cur.LastError)
			}
		}
	})
}

// redisAddr strips the scheme off a redis:// URL.
func redisAddr(url string) string { return strings.TrimPrefix(url, "redis://") }

func TestCollapsedAndClearedSession(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	for i := range 3 {
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err, i)
	}
	_, err := e.store.Clear(e.ctx, "s", redisstore.ClearOptions{})
	require.NoError(t, err)
	_, err = e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "after"}}, redisstore.AppendOptions{})
	require.NoError(t, err)

	var doc eventsDoc
	parseJSON(t, e.cli.run(t, "", "log", "s", "--json").ok(t), &doc)
	require.Len(t, doc.Events, 2, "reads start at the clear marker")
	assert.Equal(t, a2redis.ClearEventType, doc.Events[0].Type)
	assert.Equal(t, "after", doc.Events[1].Type)

	var sessions sessionsDoc
	parseJSON(t, e.cli.run(t, "", "sessions", "--json").ok(t), &sessions)
	require.Len(t, sessions.Sessions, 1)
	assert.Equal(t, sessionJSON{Session: "s", Head: 5, ClearIndex: 4}, sessions.Sessions[0], "heads of the past lifetime are not counted")
}
