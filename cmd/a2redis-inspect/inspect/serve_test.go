package inspect

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// dashServer serves the dashboard of e's prefix with o.
func dashServer(t *testing.T, e *env, o serveOptions) *httptest.Server {
	t.Helper()
	a := &app{env: Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }, Now: e.clock.Now}}
	a.opts.urls.init(e.cli.url)
	a.opts.prefix = e.cli.prefix
	a.opts.timeout = DefaultTimeout
	require.NoError(t, a.prepare(e.ctx, needData, nil))
	t.Cleanup(func() { a.client.Close() })
	h, err := a.dashboard(o)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// wrongToken is a CSRF token of the same length that differs from token
// (its first digit changed).
func wrongToken(token string) string {
	first := "0"
	if token[0] == '0' {
		first = "1"
	}
	return first + token[1:]
}

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF field in %s", page)
	return m[1]
}

func post(t *testing.T, srv *httptest.Server, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/redrive", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func billerHead() string {
	return url.Values{"c": {"biller"}, "l": {"billing"}, "i": {"1"}}.Encode()
}

func deadCount(t *testing.T, e *env, session string) int {
	t.Helper()
	p, err := e.store.DeadLettersPage(e.ctx, session, redisstore.PageRequest{Limit: 100})
	require.NoError(t, err)
	return len(p.DeadLetters)
}

// targetEnv is the dashboard tests' env on one of their targets:
// "miniredis", "redis-server" or "cluster".
func targetEnv(t *testing.T, target string) *env {
	t.Helper()
	switch target {
	case "miniredis":
		mr, c := redistest.Miniredis(t)
		return newEnv(t, c, "redis://"+mr.Addr())
	case "redis-server":
		return serverEnv(t)
	default:
		var urls []string
		for _, addr := range redistest.ClusterAddrs(t) {
			urls = append(urls, "redis://"+addr)
		}
		return newEnv(t, redistest.Cluster(t), urls...)
	}
}

func TestServePages(t *testing.T) {
	for _, target := range []string{"miniredis", "redis-server", "cluster"} {
		t.Run(target, func(t *testing.T) {
			e := targetEnv(t, target)
			buildScenario(t, e)
			srv := dashServer(t, e, serveOptions{})

			code, body := get(t, srv, "/")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `<td class="deadcount dead"><a href="/dead?consumer=biller">1</a></td>`, "biller has a dead letter")
			require.Contains(t, body, `<tr data-consumer="mailer"><td>mailer</td><td class="due">1</td>`, "mailer's head of order-1 is due")
			require.Contains(t, body, `id="chart-backlog"`)
			require.Contains(t, body, `http-equiv="refresh"`)

			code, body = get(t, srv, "/shards")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `href="/session?id=order-1"`, "order-1 has work")
			require.Contains(t, body, `<td class="dead">1</td>`, "order-1 has a dead letter")
			require.Contains(t, body, "biller")

			code, body = get(t, srv, "/sessions?q=order-")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, ">order-1<")
			require.Contains(t, body, ">order-2<")
			require.NotContains(t, body, "odd")

			code, body = get(t, srv, "/session?id=order-1")
			require.Equal(t, http.StatusOK, code, body)
			for _, want := range []string{"card declined", "biller", "alice", `&#34;items&#34;: [`, "order.paid", "dead", `class="cause"`, "Read-only"} {
				require.Contains(t, body, want)
			}
			require.NotContains(t, body, `name="one"`, "no redrive buttons when read-only")

			require.Contains(t, body, "&lt;42&gt; &amp; more", "payloads are HTML-escaped")
			require.NotContains(t, body, "<42>")

			// A claim past its lease shows as lapsed; the takeover's reason
			// shows on the page.
			require.Contains(t, body, `class="state state-claimed">claimed<`)
			e.clock.Advance(2 * time.Minute)
			_, body = get(t, srv, "/session?id=order-1")
			require.Contains(t, body, `class="state state-lapsed">lapsed<`, "no view counts a lapsed claim as live")
			require.NotContains(t, body, `state-claimed`)
			_, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "order-1", Holder: "worker-8", TTL: time.Minute, Consumers: []a2redis.Consumer{{Name: "mailer"}}})
			require.NoError(t, err)
			_, body = get(t, srv, "/session?id=order-1")
			require.Contains(t, body, "lease expired: held by worker-7 until ")
			require.Contains(t, body, ", taken over by worker-8 at "+e.clock.Now().UTC().Format("2006-01-02T15:04:05.000Z"))

			code, body = get(t, srv, "/session?id="+url.QueryEscape(oddSession))
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `odd &#34;id&#34; {x}`)
			require.Contains(t, body, `/session/tail?id=odd%20%22id%22%20%7bx%7d`, "ids in links are URL-escaped")

			code, _ = get(t, srv, "/session?id=nope")
			require.Equal(t, http.StatusNotFound, code)
			code, _ = get(t, srv, "/workers")
			require.Equal(t, http.StatusOK, code)
			code, body = get(t, srv, "/static/app.js")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, body, "EventSource")
		})
	}
}

func TestServeReadOnlyRefusesPost(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	srv := dashServer(t, e, serveOptions{})
	_, page := get(t, srv, "/session?id=order-1")
	code, body := post(t, srv, url.Values{"csrf": {csrfOf(t, page)}, "session": {orderSession}, "one": {"retry " + billerHead()}, "confirm": {"yes"}}, nil)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "read-only")
	require.Equal(t, 1, deadCount(t, e, orderSession))
}

func TestServeCSRFAndRedrive(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	srv := dashServer(t, e, serveOptions{allowWrites: true})
	_, page := get(t, srv, "/session?id=order-1")
	require.Contains(t, page, `name="one"`)
	token := csrfOf(t, page)
	form := url.Values{"session": {orderSession}, "one": {"retry " + billerHead()}, "confirm": {"yes"}}

	code, _ := post(t, srv, form, nil)
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	form.Set("csrf", wrongToken(token))
	code, _ = post(t, srv, form, nil)
	require.Equal(t, http.StatusForbidden, code, "wrong CSRF token")
	form.Set("csrf", token)
	code, _ = post(t, srv, form, map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, code, "foreign origin")
	code, _ = post(t, srv, form, map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, code, "cross-site fetch")
	require.Equal(t, 1, deadCount(t, e, orderSession))

	// Without confirm: a confirmation page, nothing written.
	form.Del("confirm")
	code, body := post(t, srv, form, map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="confirm"`)
	require.Equal(t, 1, deadCount(t, e, orderSession))

	form.Set("confirm", "yes")
	code, body = post(t, srv, form, map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Equal(t, 0, deadCount(t, e, orderSession))
	cp, err := e.store.CursorsPage(e.ctx, orderSession, redisstore.PageRequest{Limit: 100})
	require.NoError(t, err)
	for _, c := range cp.Cursors {
		if c.Consumer == "biller" {
			require.False(t, c.DeadLettered())
			require.Zero(t, c.Failures)
		}
	}
}

func TestServeToken(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	srv := dashServer(t, e, serveOptions{token: "s3cret"})
	code, _ := get(t, srv, "/")
	require.Equal(t, http.StatusUnauthorized, code)
	for _, auth := range []func(*http.Request){
		func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") },
		func(r *http.Request) { r.SetBasicAuth("ops", "s3cret") },
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		auth(req)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestServeBind(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	line := e.cli.run(t, "", "serve", "--addr", "0.0.0.0:0").failed(t, ExitUsage)
	require.Contains(t, line, "--token")
	line = e.cli.run(t, "", "serve", "--addr", "[::]:0").failed(t, ExitUsage)
	require.Contains(t, line, "--token")

	// Loopback starts and stops with the context.
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"--url", e.cli.url, "--prefix", e.cli.prefix, "serve", "--addr", "127.0.0.1:0"}, Env{Stdout: out})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "dashboard on http://127.0.0.1:") }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, ExitOK, <-done)
}

func TestServeTail(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	srv := dashServer(t, e, serveOptions{})
	b, err := e.store.Bounds(e.ctx, quietSession)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/session/tail?id="+quietSession+"&after="+itoa(b.Head), nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, ": following\n", first)
	_, err = e.store.Append(e.ctx, quietSession, []a2redis.Event{{ID: "live-1", Type: "live.note", Payload: json.RawMessage(`{"n":1}`)}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	require.Equal(t, tailEvent{Index: b.Head + 1, Type: "live.note", ID: "live-1"}, nextTailEvent(t, r, true))

	// A reconnect with Last-Event-ID goes on after that event.
	_, err = e.store.Append(e.ctx, quietSession, []a2redis.Event{{ID: "live-2", Type: "live.note"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/session/tail?id="+quietSession+"&after="+itoa(b.Head), nil)
	require.NoError(t, err)
	req.Header.Set("Last-Event-ID", itoa(b.Head+1))
	resp2, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	require.Equal(t, tailEvent{Index: b.Head + 2, Type: "live.note", ID: "live-2"}, nextTailEvent(t, bufio.NewReader(resp2.Body), true))
}

// nextTailEvent reads the stream up to its next event (without its time and
// payload when bare).
func nextTailEvent(t *testing.T, r *bufio.Reader, bare bool) tailEvent {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var ev tailEvent
			require.NoError(t, json.Unmarshal([]byte(data), &ev))
			require.NotEmpty(t, ev.CreatedAt)
			if bare {
				ev.CreatedAt, ev.Payload = "", ""
			}
			return ev
		}
	}
}

var headField = regexp.MustCompile(`name="h" value="([^"]+)"`)

func TestServeBulkRedrive(t *testing.T) {
	e := serverEnv(t)
	flaky := a2redis.Consumer{Name: "flaky"}
	consumers := []a2redis.Consumer{flaky}
	_, err := e.store.Append(e.ctx, "bulk", []a2redis.Event{
		{Type: "a", Targets: []a2redis.Target{{Consumer: "flaky"}}},
		{Type: "b", Targets: []a2redis.Target{{Consumer: "flaky"}}},
		{Type: "c", Targets: []a2redis.Target{{Consumer: "flaky"}}},
	}, redisstore.AppendOptions{Consumers: consumers})
	require.NoError(t, err)
	for failed := 0; failed < 3; {
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "bulk", Holder: "w", TTL: time.Minute, Consumers: consumers})
		require.NoError(t, err)
		require.NotEmpty(t, claim.Heads)
		for _, h := range claim.Heads {
			_, err := e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "bulk", Head: h.Ref(), Attempt: h.Attempts, Error: "boom", MaxFailures: 1})
			require.NoError(t, err)
			failed++
		}
	}
	srv := dashServer(t, e, serveOptions{allowWrites: true})
	_, page := get(t, srv, "/session?id=bulk")
	var heads []string
	for _, m := range headField.FindAllStringSubmatch(page, -1) {
		heads = append(heads, html.UnescapeString(m[1]))
	}
	require.Len(t, heads, 3)
	same := map[string]string{"Origin": srv.URL}
	form := url.Values{"csrf": {csrfOf(t, page)}, "session": {"bulk"}, "action": {"skip"}, "h": heads[:2]}
	code, body := post(t, srv, form, same)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "skip 2 dead letter(s)")
	require.Equal(t, 3, deadCount(t, e, "bulk"), "nothing written before the confirmation")
	form.Set("confirm", "yes")
	code, body = post(t, srv, form, same)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Equal(t, 1, deadCount(t, e, "bulk"))

	form.Set("action", "delete")
	code, _ = post(t, srv, form, same)
	require.Equal(t, http.StatusBadRequest, code)
}

var (
	nextLink   = regexp.MustCompile(`id="next" href="([^"]+)"`)
	sessionRow = regexp.MustCompile(`<tr><td><a href="/session\?id=[^"]+">([^<]+)</a>`)
)

// TestServeSearchPages follows the search's "more…" links to the end, on a
// server and on a cluster (the token resumes the scan node by node): every
// matching session listed, each page about a page long.
func TestServeSearchPages(t *testing.T) {
	for _, target := range []string{"redis-server", "cluster"} {
		t.Run(target, func(t *testing.T) {
			var e *env
			if target == "redis-server" {
				e = serverEnv(t)
			} else {
				var urls []string
				for _, addr := range redistest.ClusterAddrs(t) {
					urls = append(urls, "redis://"+addr)
				}
				e = newEnv(t, redistest.Cluster(t), urls...)
			}
			const n = 250
			for i := range n {
				_, err := e.store.Append(e.ctx, fmt.Sprintf("s-%03d", i), []a2redis.Event{{Type: "n"}}, redisstore.AppendOptions{})
				require.NoError(t, err)
			}
			_, err := e.store.Append(e.ctx, "other", []a2redis.Event{{Type: "n"}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			srv := dashServer(t, e, serveOptions{})
			seen := map[string]bool{}
			path := "/sessions?q=s-"
			for pages := 0; ; pages++ {
				require.Less(t, pages, 50, "the search pages end")
				code, body := get(t, srv, path)
				require.Equal(t, http.StatusOK, code, body)
				rows := sessionRow.FindAllStringSubmatch(body, -1)
				require.LessOrEqual(t, len(rows), dashboardPage+10)
				onPage := map[string]bool{}
				for _, m := range rows {
					// SCAN may return a key twice across calls (a rehash
					// while other tests write): unique on a page, once at
					// least over all pages.
					require.False(t, onPage[m[1]], "%s listed twice on a page", m[1])
					require.True(t, strings.HasPrefix(m[1], "s-"), m[1])
					onPage[m[1]] = true
					seen[m[1]] = true
				}
				next := nextLink.FindStringSubmatch(body)
				if next == nil {
					break
				}
				path = html.UnescapeString(next[1])
			}
			require.Len(t, seen, n)
		})
	}
}

// postPath is post on another path, with headers.
func postPath(t *testing.T, srv *httptest.Server, path string, form url.Values, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeDrop(t *testing.T) {
	e := serverEnv(t)
	buildScenario(t, e)
	head := func() int64 {
		b, err := e.store.Bounds(e.ctx, orderSession)
		require.NoError(t, err)
		return b.Head
	}
	before := head()
	require.Positive(t, before)

	// Read-only: no drop button, and a POST is refused.
	ro := dashServer(t, e, serveOptions{})
	_, page := get(t, ro, "/session?id="+orderSession)
	require.NotContains(t, page, `id="drop"`)
	code, body := postPath(t, ro, "/drop", url.Values{"csrf": {csrfOf(t, page)}, "session": {orderSession}, "confirm": {"yes"}}, nil)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Equal(t, before, head())

	srv := dashServer(t, e, serveOptions{allowWrites: true})
	_, page = get(t, srv, "/session?id="+orderSession)
	require.Contains(t, page, `id="drop"`)
	token := csrfOf(t, page)
	same := map[string]string{"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"}
	form := url.Values{"session": {orderSession}, "confirm": {"yes"}}
	code, _ = postPath(t, srv, "/drop", form, same)
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	form.Set("csrf", token)
	code, _ = postPath(t, srv, "/drop", form, map[string]string{"Origin": "http://evil.example"})
	require.Equal(t, http.StatusForbidden, code, "foreign origin")
	require.Equal(t, before, head())

	// Without confirm: a confirmation page, nothing written.
	form.Del("confirm")
	code, body = postPath(t, srv, "/drop", form, same)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="confirm-drop"`)
	require.Equal(t, before, head())

	form.Set("confirm", "yes")
	code, body = postPath(t, srv, "/drop", form, same)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Zero(t, head())
	code, _ = get(t, srv, "/session?id="+orderSession)
	require.Equal(t, http.StatusNotFound, code, "the dropped session is gone")
}
