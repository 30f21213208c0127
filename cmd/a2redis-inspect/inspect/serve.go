package inspect

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

//go:embed web
var webFS embed.FS

// DefaultServeAddr is where serve listens unless --addr says otherwise.
const DefaultServeAddr = "127.0.0.1:8080"

// dashboardPage is how many items one dashboard list shows (one store page
// call each).
const dashboardPage = 100

// pageCalls bounds the store page calls that fill one list.
const pageCalls = 4

// logPage is how many events the session page shows at a time.
const logPage = 50

func serveCommand() command {
	return command{
		name:    "serve",
		summary: "serve the web dashboard (overview, sessions, workers, dead letters, live tail)",
		details: `Serves a web dashboard on --addr (default 127.0.0.1:8080): the overview
per consumer (due, in flight, held, dead, completed and failed per
minute, oldest due age, with charts of the last hour sampled every 10s by
this process; refreshes every 10s), dead letters across sessions
(filtered by consumer and error text), the shards page (ready index per
shard, sessions with work, consumer lag), a session search by id
prefix (SCAN, paged), a session page (log, cursors, dead letters,
presence, live tail over server-sent events) and the workers page. Every
request does a bounded amount of Redis work: lists show pages of at most
100 items, one store page call each.
Read-only unless --allow-writes: then dead letters can be retried or
skipped (single or bulk, confirmed on a page of its own; across sessions
by filter in batches of 100 with a progress page), a cursor's
head cancelled (confirmed too) and a session dropped (Store.Drop:
everything it holds deleted; confirmed too) with POSTs that carry a
per-process CSRF token and must come from the same origin.
--token T requires T on every request, as a bearer token
(Authorization: Bearer T) or as the basic-auth password (any user name);
binding an address other than loopback requires --token.
--json does not change the pages; the live tail's server-sent events
(GET /session/tail?id=SESSION&after=INDEX) carry one event each as
JSON: {"index","type","id","created_at","payload" (pretty-printed)}.`,
		need: needData,
		setup: func(fs *flag.FlagSet) runner {
			var o serveOptions
			fs.StringVar(&o.addr, "addr", DefaultServeAddr, "listen on `HOST:PORT`")
			fs.BoolVar(&o.allowWrites, "allow-writes", false, "enable redrive (retry/skip), cancel, drop, pause and resume from the dashboard")
			fs.StringVar(&o.token, "token", "", "require `TOKEN` (bearer or basic-auth password) on every request")
			return runner{
				check: func([]string) error { return o.check() },
				run:   func(ctx context.Context, a *app, _ []string) error { return a.serve(ctx, o) },
			}
		},
	}
}

type serveOptions struct {
	addr        string
	allowWrites bool
	token       string
}

// check refuses a non-loopback bind without a token.
func (o serveOptions) check() error {
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", o.addr, err)
	}
	if o.token == "" && !isLoopback(host) {
		return fmt.Errorf("--addr %q is not a loopback address: give --token to serve it", o.addr)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a *app) serve(ctx context.Context, o serveOptions) error {
	h, d, err := a.dashboardOf(o)
	if err != nil {
		return err
	}
	go d.sampleLoop(ctx)
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	mode := "read-only"
	if o.allowWrites {
		mode = "writes enabled"
	}
	fmt.Fprintf(a.env.Stdout, "dashboard on http://%s/ (prefix %q, %s)\n", ln.Addr(), a.opts.prefix, mode)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// dash is the dashboard's handler state.
type dash struct {
	a     *app
	o     serveOptions
	csrf  string
	pages map[string]*template.Template
	hist  *history
	jobs  *redriveJobs
}

func (a *app) dashboard(o serveOptions) (http.Handler, error) {
	h, _, err := a.dashboardOf(o)
	return h, err
}

// dashboardOf builds the dashboard's handler and its state.
func (a *app) dashboardOf(o serveOptions) (http.Handler, *dash, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, nil, err
	}
	d := &dash{a: a, o: o, csrf: hex.EncodeToString(tok[:]), pages: map[string]*template.Template{}, hist: &history{}, jobs: &redriveJobs{byID: map[string]*redriveJob{}}}
	funcs := template.FuncMap{
		"time":  func(t time.Time) string { return formatTime(t) },
		"jtime": func(t jsonTime) string { return formatTime(time.Time(t)) },
		"age":   func(t time.Time) string { return age(t, a.env.Now()) },
		"q":     url.QueryEscape,
		"pretty": func(raw json.RawMessage) string {
			var b strings.Builder
			if err := jsonIndent(&b, raw); err != nil {
				return string(raw)
			}
			return b.String()
		},
		"before": func(i int64) int64 { return max(i-1, 0) },
		"after":  func(i int64) int64 { return i + 1 },
		"headKey": func(consumer, lane string, index int64) string {
			return url.Values{"c": {consumer}, "l": {lane}, "i": {itoa(index)}}.Encode()
		},
	}
	for _, p := range []string{"overview", "shards", "dead", "dead_job", "sessions", "session", "workers", "consumers", "schedules", "confirm", "cancel", "confirm_drop", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/layout.html", "web/"+p+".html")
		if err != nil {
			return nil, nil, err
		}
		d.pages[p] = t
	}
	static, err := fs.Sub(webFS, "web/static")
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", d.overview)
	mux.HandleFunc("GET /shards", d.shards)
	mux.HandleFunc("GET /stats.json", d.statsJSON)
	mux.HandleFunc("GET /dead", d.deadAcross)
	mux.HandleFunc("POST /dead/redrive", d.redriveAcross)
	mux.HandleFunc("GET /dead/job", d.redriveJobPage)
	mux.HandleFunc("GET /dead/job.json", d.redriveJobJSON)
	mux.HandleFunc("GET /sessions", d.sessions)
	mux.HandleFunc("GET /session", d.session)
	mux.HandleFunc("GET /session/tail", d.tail)
	mux.HandleFunc("GET /workers", d.workers)
	mux.HandleFunc("GET /consumers", d.consumers)
	mux.HandleFunc("GET /schedules", d.schedules)
	mux.HandleFunc("POST /redrive", d.redrive)
	mux.HandleFunc("POST /cancel", d.cancel)
	mux.HandleFunc("POST /drop", d.drop)
	mux.HandleFunc("POST /consumer", d.consumerAction)
	return d.guard(mux), d, nil
}

// guard checks the token and, for POSTs, the write switch, the origin and
// the CSRF token.
func (d *dash) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'")
		if d.o.token != "" && !d.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="a2redis"`)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !d.o.allowWrites {
				http.Error(w, "read-only dashboard: start serve with --allow-writes to redrive, cancel, drop, pause or resume", http.StatusForbidden)
				return
			}
			if !sameOrigin(r) {
				http.Error(w, "cross-site request refused", http.StatusForbidden)
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(d.csrf)) != 1 {
				http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (d *dash) authorized(r *http.Request) bool {
	want := []byte(d.o.token)
	if _, pass, ok := r.BasicAuth(); ok {
		return subtle.ConstantTimeCompare([]byte(pass), want) == 1
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(bearer), want) == 1
	}
	return false
}

// sameOrigin: Sec-Fetch-Site, when sent, must be same-origin (or none: typed
// by the user); Origin, when sent, must be this host.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func (d *dash) call(r *http.Request) (context.Context, context.CancelFunc) {
	return d.a.call(r.Context())
}

func (d *dash) render(w http.ResponseWriter, page string, data map[string]any) {
	data["Prefix"] = d.a.opts.prefix
	data["Writes"] = d.o.allowWrites
	data["CSRF"] = d.csrf
	data["Now"] = formatTime(d.a.env.Now())
	if _, ok := data["Query"]; !ok {
		data["Query"] = ""
	}
	if _, ok := data["Refresh"]; !ok {
		data["Refresh"] = 0
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := d.pages[page].Execute(w, data); err != nil {
		fmt.Fprintf(d.a.env.Stderr, "%s: rendering %s: %v\n", name, page, err)
	}
}

func (d *dash) fail(w http.ResponseWriter, err error) {
	var ns *errNoSession
	code := http.StatusInternalServerError
	if errors.As(err, &ns) {
		code = http.StatusNotFound
	}
	w.WriteHeader(code)
	d.render(w, "error", map[string]any{"Error": d.a.explain(err)})
}

// overviewShard is one shard's row.
type overviewShard struct {
	redisstore.ReadyShardStats
	Sessions []overviewSession
}

type overviewSession struct {
	sessionJSON
	Due bool
	At  time.Time
}

type consumerLag struct {
	Consumer string
	Lag      int64
	Dead     int64
	Cursors  int
}

// shards: ReadyStats (one call), one ReadyPage per shard (≤ 100 sessions
// in all), one pipelined round of session stats, one CursorsPage for each
// of the first overviewLagSessions sessions, one bounded scan page (for
// dead letters) and its stats, one Workers page.
func (d *dash) shards(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a := d.a
	cctx, cancel := d.call(r)
	stats, err := a.store.ReadyStats(cctx)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	per := max(dashboardPage/max(len(stats), 1), 1)
	now := a.env.Now()
	var shards []overviewShard
	var ids []string
	for _, st := range stats {
		cctx, cancel := d.call(r)
		page, _, err := a.store.ReadyPage(cctx, st.Shard, time.Time{}, per)
		cancel()
		if err != nil {
			d.fail(w, err)
			return
		}
		sh := overviewShard{ReadyShardStats: st}
		for _, p := range page {
			sh.Sessions = append(sh.Sessions, overviewSession{sessionJSON: sessionJSON{Session: p.Session}, Due: !p.At.After(now), At: p.At})
			ids = append(ids, p.Session)
		}
		shards = append(shards, sh)
	}
	rows, err := a.sessionStats(ctx, ids)
	if err != nil {
		d.fail(w, err)
		return
	}
	byID := map[string]sessionJSON{}
	for _, row := range rows {
		byID[row.Session] = row
	}
	for i := range shards {
		for j := range shards[i].Sessions {
			s := &shards[i].Sessions[j]
			s.sessionJSON = byID[s.Session]
		}
	}
	lags := map[string]*consumerLag{}
	for i, id := range ids {
		if i == overviewLagSessions {
			break
		}
		page, _, err := d.cursorPage(r, id, "")
		if err != nil {
			d.fail(w, err)
			return
		}
		for _, c := range page {
			l := lags[c.Consumer]
			if l == nil {
				l = &consumerLag{Consumer: c.Consumer}
				lags[c.Consumer] = l
			}
			l.Cursors++
			l.Lag += lag(c, byID[id].Head)
			if c.DeadLettered() {
				l.Dead++
			}
		}
	}
	// Dead letters are not in the ready index: one bounded scan page finds
	// the sessions that have some among the first ones scanned.
	scanned, more, err := a.sessionScanPage(ctx, "", "", dashboardPage)
	if err != nil {
		d.fail(w, err)
		return
	}
	scannedRows, err := a.sessionStats(ctx, scanned)
	if err != nil {
		d.fail(w, err)
		return
	}
	var dead []sessionJSON
	for _, row := range scannedRows {
		if row.DeadLettered > 0 {
			dead = append(dead, row)
		}
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].Session < dead[j].Session })
	var consumers []consumerLag
	for _, l := range lags {
		consumers = append(consumers, *l)
	}
	sort.Slice(consumers, func(i, j int) bool { return consumers[i].Consumer < consumers[j].Consumer })
	cctx, cancel = d.call(r)
	wp, err := a.store.Workers(cctx, redisstore.PageRequest{Limit: dashboardPage})
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	d.render(w, "shards", map[string]any{
		"Title": "Shards", "Refresh": 5, "Shards": shards, "Consumers": consumers,
		"LagSessions": min(len(ids), overviewLagSessions), "Dead": dead, "Scanned": len(scanned), "ScanMore": more != "", "Workers": len(wp.Workers), "MoreWorkers": wp.Next != "",
	})
}

// overviewLagSessions bounds how many sessions' cursors the overview reads.
const overviewLagSessions = 20

// sessions: one bounded SCAN walk (at most sessionScanCalls calls), then
// one pipelined round of stats.
func (d *dash) sessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("q")
	match := keys.EscapeGlob(prefix) + "*"
	ids, next, err := d.a.sessionScanPage(r.Context(), match, q.Get("after"), dashboardPage)
	if err != nil {
		d.fail(w, err)
		return
	}
	rows, err := d.a.sessionStats(r.Context(), ids)
	if err != nil {
		d.fail(w, err)
		return
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Session < rows[j].Session })
	d.render(w, "sessions", map[string]any{"Title": "Sessions", "Query": prefix, "Rows": rows, "Next": next})
}

// sessionScanCalls bounds the SCAN calls of one sessions page.
const sessionScanCalls = 10

// sessionScanPage resumes a scan of the session log keys at token ("" to
// start; "node:cursor") and returns about want ids (SCAN's COUNT is a hint:
// a call may return a few more than asked) and the token of the rest (""
// when the scan is done). It makes at most sessionScanCalls SCAN calls.
func (a *app) sessionScanPage(ctx context.Context, match, token string, want int) ([]string, string, error) {
	nodes, err := a.scanNodes(ctx)
	if err != nil {
		return nil, "", err
	}
	nodeAt, cursor := 0, uint64(0)
	if token != "" {
		n, c, ok := strings.Cut(token, ":")
		ni, err1 := strconv.Atoi(n)
		ci, err2 := strconv.ParseUint(c, 10, 64)
		if !ok || err1 != nil || err2 != nil || ni < 0 || ni >= len(nodes) {
			return nil, "", usagef("bad page token %q", token)
		}
		nodeAt, cursor = ni, ci
	}
	seen := map[string]bool{}
	var ids []string
	pattern := a.sessionPattern(match)
	for calls := 0; calls < sessionScanCalls && len(ids) < want; calls++ {
		// COUNT is what the page still lacks (at least 10), so a page
		// holds about want ids, rarely a few more.
		page, next, err := a.scanStep(ctx, nodes[nodeAt], cursor, max(want-len(ids), 10), pattern, match)
		if err != nil {
			return nil, "", err
		}
		for _, id := range page {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		cursor = next
		if cursor == 0 {
			nodeAt++
			if nodeAt == len(nodes) {
				return ids, "", nil
			}
		}
	}
	return ids, fmt.Sprintf("%d:%d", nodeAt, cursor), nil
}

// cursorPage reads up to dashboardPage cursors of session from after: a
// store page may end early where one kind of cursor ends, so it reads on,
// pageCalls calls at most.
func (d *dash) cursorPage(r *http.Request, session, after string) ([]a2redis.Cursor, string, error) {
	return d.a.cursorPage(r.Context(), session, after)
}

// cursorPage is dash.cursorPage for any caller.
func (a *app) cursorPage(ctx context.Context, session, after string) ([]a2redis.Cursor, string, error) {
	var all []a2redis.Cursor
	next := after
	for calls := 0; calls == 0 || (next != "" && len(all) < dashboardPage && calls < pageCalls); calls++ {
		cctx, cancel := a.call(ctx)
		cp, err := a.store.CursorsPage(cctx, session, redisstore.PageRequest{After: next, Limit: dashboardPage - len(all)})
		cancel()
		if err != nil {
			return nil, "", err
		}
		all = append(all, cp.Cursors...)
		next = cp.Next
	}
	return all, next, nil
}

type logRow struct {
	a2redis.StoredEvent
	Pretty string
}

// session: Bounds, one ReadPages of ≤ logPage events, one CursorsPage, one
// DeadLettersPage, one PresenceRead.
func (d *dash) session(w http.ResponseWriter, r *http.Request) {
	a := d.a
	q := r.URL.Query()
	id := q.Get("id")
	if id == "" {
		http.Redirect(w, r, "/sessions", http.StatusSeeOther)
		return
	}
	ctx := r.Context()
	if err := a.requireSession(ctx, id); err != nil {
		d.fail(w, err)
		return
	}
	b, err := a.bounds(ctx, id)
	if err != nil {
		d.fail(w, err)
		return
	}
	first := max(b.ClearIndex-1, b.Floor, 0) // the retained log starts after a trim's floor
	after := max(b.Head-logPage, first)
	if v := q.Get("after"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			after = max(n, first)
		}
	}
	through := min(after+logPage, b.Head)
	var events []a2redis.StoredEvent
	if through > after {
		cctx, cancel := d.call(r)
		err = a.store.ReadPages(cctx, id, after, through, func(page []a2redis.StoredEvent) error {
			events = append(events, page...)
			return nil
		})
		cancel()
		if err != nil {
			d.fail(w, err)
			return
		}
	}
	all, cursorsNext, err := d.cursorPage(r, id, q.Get("cursors"))
	if err != nil {
		d.fail(w, err)
		return
	}
	now := a.env.Now()
	cctx, cancel := d.call(r)
	gone, err := a.goneHolders(cctx, all, now)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	var cursors []cursorJSON
	for _, c := range all {
		cursors = append(cursors, cursorJSON{Consumer: c.Consumer, Kind: string(c.Kind), Lane: c.Lane,
			Position: c.Position, Head: c.Head, Lag: lag(c, b.Head), State: cursorState(c, now, gone),
			Attempts: c.Attempts, Failures: c.Failures, Holder: c.Holder, LastError: c.LastError,
			ClaimExpiresAt: jsonTime(c.ClaimExpiresAt)})
	}
	cctx, cancel = d.call(r)
	dp, err := a.store.DeadLettersPage(cctx, id, redisstore.PageRequest{After: q.Get("dead"), Limit: dashboardPage})
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	cctx, cancel = d.call(r)
	pres, err := a.store.PresenceRead(cctx, id)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	rows := make([]logRow, len(events))
	for i, e := range events {
		rows[i] = logRow{StoredEvent: e, Pretty: prettyJSON(e.Payload)}
	}
	older := int64(-1)
	if after > first {
		older = max(after-logPage, first)
	}
	newer := int64(-1)
	if through < b.Head {
		newer = through
	}
	d.render(w, "session", map[string]any{
		"Title": "Session " + id, "ID": id, "Bounds": b, "Events": rows, "Older": older, "Newer": newer,
		"Cursors": cursors, "CursorsNext": cursorsNext, "Dead": dp.DeadLetters, "DeadNext": dp.Next,
		"Presence": pres, "TailAfter": b.Head,
	})
}

func prettyJSON(raw json.RawMessage) string {
	var b strings.Builder
	if err := jsonIndent(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func jsonIndent(b *strings.Builder, raw json.RawMessage) error {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return err
	}
	b.Write(out.Bytes())
	return nil
}

// tailEvent is one server-sent event of the live tail.
type tailEvent struct {
	Index     int64  `json:"index"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	CreatedAt string `json:"created_at"`
	Payload   string `json:"payload"`
}

// tail streams the session's new events as server-sent events, through the
// wake-up feed (as tail -f does).
func (d *dash) tail(w http.ResponseWriter, r *http.Request) {
	a := d.a
	id := r.URL.Query().Get("id")
	after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if id == "" || err != nil || after < 0 {
		http.Error(w, "id and after are required", http.StatusBadRequest)
		return
	}
	// A reconnecting EventSource names the last event it got: go on from
	// there, so nothing shows twice.
	if last, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && last > after {
		after = last
	}
	if err := a.requireSession(r.Context(), id); err != nil {
		http.Error(w, a.explain(err), http.StatusNotFound)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, ": following\n\n")
	flusher.Flush()
	feed := notify.NewFeed(a.store, notify.FeedOptions{Source: timedSource{a: a}})
	_ = feed.Follow(r.Context(), id, after, func(u notify.Update) error {
		for _, e := range u.Events {
			b, err := json.Marshal(tailEvent{Index: e.Index, Type: e.Type, ID: e.ID, CreatedAt: formatTime(e.CreatedAt), Payload: prettyJSON(e.Payload)})
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Index, b); err != nil {
				return err
			}
		}
		flusher.Flush()
		return nil
	})
}

// workers: one Workers page.
func (d *dash) workers(w http.ResponseWriter, r *http.Request) {
	cctx, cancel := d.call(r)
	page, err := d.a.store.Workers(cctx, redisstore.PageRequest{After: r.URL.Query().Get("after"), Limit: dashboardPage})
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	sort.Slice(page.Workers, func(i, j int) bool { return page.Workers[i].ID < page.Workers[j].ID })
	d.render(w, "workers", map[string]any{"Title": "Workers", "Refresh": 5, "Workers": page.Workers, "Next": page.Next})
}

// consumerRow is one consumer of the consumers page.
type consumerRow struct {
	Name, State, Kind, Lane, Types, Start string
	// PerSession and MaxFailures are the consumer's settings, or "-".
	PerSession, MaxFailures string
}

// consumers renders the prefix's consumer registry, with pause and resume
// buttons when writes are enabled.
func (d *dash) consumers(w http.ResponseWriter, r *http.Request) {
	cctx, cancel := d.call(r)
	list, version, err := d.a.store.ReadConsumers(cctx)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	paused := d.a.store.Paused()
	rows := make([]consumerRow, len(list))
	for i, c := range list {
		row := consumerRow{Name: c.Name, State: "running", Kind: "events", PerSession: "-", MaxFailures: "-"}
		if c.PerSession > 0 {
			row.PerSession = strconv.Itoa(c.PerSession)
		}
		if c.MaxFailures > 0 {
			row.MaxFailures = strconv.Itoa(c.MaxFailures)
		}
		if slices.Contains(paused, c.Name) {
			row.State = "paused"
		}
		if c.Log != nil {
			row.Kind, row.Lane, row.Types, row.Start = "log", c.Log.Lane, "*", "new"
			if c.Log.Types != nil {
				row.Types = strings.Join(c.Log.Types, ", ")
			}
			if c.Log.Backfill {
				row.Start = "backfill"
			}
		}
		rows[i] = row
	}
	d.render(w, "consumers", map[string]any{"Title": "Consumers", "Refresh": 5, "Consumers": rows, "Version": version})
}

// consumerAction pauses or resumes the consumer the form names.
func (d *dash) consumerAction(w http.ResponseWriter, r *http.Request) {
	name, action := r.PostFormValue("name"), r.PostFormValue("action")
	if name == "" || (action != "pause" && action != "resume") {
		http.Error(w, "name a consumer and an action, pause or resume", http.StatusBadRequest)
		return
	}
	cctx, cancel := d.call(r)
	defer cancel()
	var err error
	if action == "pause" {
		err = d.a.store.PauseConsumer(cctx, name)
	} else {
		err = d.a.store.ResumeConsumer(cctx, name)
	}
	if err != nil {
		d.fail(w, err)
		return
	}
	http.Redirect(w, r, "/consumers", http.StatusSeeOther)
}

// scheduleRow is one schedule of the schedules page.
type scheduleRow struct {
	redisstore.ScheduleInfo
	Overdue bool
}

// schedules renders the prefix's schedule listing.
func (d *dash) schedules(w http.ResponseWriter, r *http.Request) {
	cctx, cancel := d.call(r)
	list, err := d.a.store.Schedules(cctx)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	now := d.a.env.Now()
	rows := make([]scheduleRow, len(list))
	for i, s := range list {
		rows[i] = scheduleRow{ScheduleInfo: s, Overdue: !s.Next.IsZero() && now.Sub(s.Next) > overdueAfter}
	}
	d.render(w, "schedules", map[string]any{"Title": "Schedules", "Refresh": 5, "Schedules": rows})
}

// cancel cancels the head named in h (consumer, lane, index): without
// confirm=yes it renders a confirmation page; with it, one Cancel call.
func (d *dash) cancel(w http.ResponseWriter, r *http.Request) {
	id, key := r.PostFormValue("session"), strings.TrimSpace(r.PostFormValue("h"))
	v, err := url.ParseQuery(key)
	idx, err2 := strconv.ParseInt(v.Get("i"), 10, 64)
	if id == "" || err != nil || err2 != nil || v.Get("c") == "" || idx <= 0 {
		http.Error(w, fmt.Sprintf("name a session and a head (got %q)", key), http.StatusBadRequest)
		return
	}
	h := redriveHead{Consumer: v.Get("c"), Lane: v.Get("l"), Index: idx}
	if r.PostFormValue("confirm") != "yes" {
		kind := "event"
		if h.Lane != "" {
			kind = "lane or log"
		}
		d.render(w, "cancel", map[string]any{"Title": "Confirm cancel", "ID": id, "Kind": kind, "Consumer": h.Consumer, "Lane": h.Lane, "Index": h.Index, "Key": key})
		return
	}
	cctx, done := d.call(r)
	res, err := d.a.store.Cancel(cctx, redisstore.CancelRequest{Session: id, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index})
	done()
	if err != nil {
		d.fail(w, err)
		return
	}
	if res.Outcome != redisstore.Cancelled {
		d.fail(w, fmt.Errorf("nothing cancelled (%s): the head changed meanwhile", res.Outcome))
		return
	}
	http.Redirect(w, r, "/session?id="+url.QueryEscape(id), http.StatusSeeOther)
}

// redriveHead is one head a redrive form names.
type redriveHead struct {
	Consumer, Lane string
	Index          int64
}

// redrive acts on the heads named (h, repeatable, or one in "one") with
// action retry or skip: without confirm=yes it renders a confirmation page;
// with it, one Redrive call per head (at most dashboardPage).
func (d *dash) redrive(w http.ResponseWriter, r *http.Request) {
	a := d.a
	id := r.PostFormValue("session")
	action := redisstore.RedriveAction(r.PostFormValue("action"))
	keys := r.PostForm["h"]
	if one := r.PostFormValue("one"); one != "" {
		action, keys = redisstore.RedriveAction(strings.SplitN(one, " ", 2)[0]), []string{strings.SplitN(one+" ", " ", 2)[1]}
	}
	if action != redisstore.Retry && action != redisstore.Skip {
		http.Error(w, "action must be retry or skip", http.StatusBadRequest)
		return
	}
	if id == "" || len(keys) == 0 || len(keys) > dashboardPage {
		http.Error(w, fmt.Sprintf("name a session and 1 to %d heads", dashboardPage), http.StatusBadRequest)
		return
	}
	var heads []redriveHead
	for _, k := range keys {
		v, err := url.ParseQuery(strings.TrimSpace(k))
		idx, err2 := strconv.ParseInt(v.Get("i"), 10, 64)
		if err != nil || err2 != nil || v.Get("c") == "" || idx <= 0 {
			http.Error(w, fmt.Sprintf("bad head %q", k), http.StatusBadRequest)
			return
		}
		heads = append(heads, redriveHead{Consumer: v.Get("c"), Lane: v.Get("l"), Index: idx})
	}
	if r.PostFormValue("confirm") != "yes" {
		d.render(w, "confirm", map[string]any{"Title": "Confirm " + string(action), "ID": id, "Action": string(action), "Heads": heads, "Keys": keys})
		return
	}
	for _, h := range heads {
		cctx, cancel := d.call(r)
		_, err := a.store.Redrive(cctx, redisstore.RedriveRequest{Session: id, Consumer: h.Consumer, Lane: h.Lane, Index: h.Index, Action: action})
		cancel()
		if err != nil {
			d.fail(w, err)
			return
		}
	}
	http.Redirect(w, r, "/session?id="+url.QueryEscape(id), http.StatusSeeOther)
}

// drop deletes the session named by "session" (Store.Drop): without
// confirm=yes it renders a confirmation page; with it, it drops and
// redirects to the sessions list.
func (d *dash) drop(w http.ResponseWriter, r *http.Request) {
	id := r.PostFormValue("session")
	if id == "" {
		http.Error(w, "name a session", http.StatusBadRequest)
		return
	}
	cctx, cancel := d.call(r)
	b, err := d.a.store.Bounds(cctx, id)
	cancel()
	if err != nil {
		d.fail(w, err)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		d.render(w, "confirm_drop", map[string]any{"Title": "Confirm drop", "ID": id, "Bounds": b})
		return
	}
	// Many bounded calls: the request's context, not one call's timeout.
	res, err := d.a.store.Drop(r.Context(), id)
	if err != nil {
		d.fail(w, err)
		return
	}
	if !res.Dropped {
		d.fail(w, fmt.Errorf("session %q holds a new lifetime (head %d) appended while the drop ran: its past up to %d is deleted, the new events are kept", id, res.Index, res.ClearIndex))
		return
	}
	http.Redirect(w, r, "/sessions", http.StatusSeeOther)
}
