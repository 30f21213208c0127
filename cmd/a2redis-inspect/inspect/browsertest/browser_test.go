package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/presence"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const chromiumPath = "/usr/bin/chromium"

// browser returns a chromedp context on a fresh headless Chromium.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		p, lerr := exec.LookPath("chromium")
		if lerr != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true and no Chromium at %s or on PATH: install Debian's chromium package", chromiumPath)
			}
			t.Skip("no Chromium installed (apt-get install chromium)")
		}
		path = p
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancel := chromedp.NewContext(actx)
	// The first call starts the browser, which lives as long as bctx: no
	// timeout on it, one on everything after.
	require.NoError(t, chromedp.Do(bctx), "starting Chromium")
	ctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

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

var listening = regexp.MustCompile(`dashboard on (http://\S+/)`)

// serve runs a2redis-inspect serve on a free loopback port and returns its
// base URL.
func serve(t *testing.T, url, prefix string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	args := append([]string{"--url", url, "--prefix", prefix, "serve", "--addr", "127.0.0.1:0"}, extra...)
	go func() { done <- inspect.Run(ctx, args, inspect.Env{Stdout: out, Stderr: errOut}) }()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, inspect.ExitOK, <-done, "stderr: %s", errOut.String())
	})
	var base string
	require.Eventually(t, func() bool {
		if m := listening.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "serve did not start: %s", errOut.String())
	return base
}

var (
	mailer = a2redis.Consumer{Name: "mailer"}
	biller = a2redis.Consumer{Name: "biller"}
	served = []a2redis.Consumer{mailer, biller}
)

// fill writes a small demo: order sessions with work, one dead letter
// (biller's lane "billing" at index 1 of order-1001), presence and a worker.
func fill(t *testing.T, ctx context.Context, client rueidis.Client, prefix string) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	for _, s := range []string{"order-1001", "order-1002", "order-1003", "invoice-7"} {
		_, err := store.Append(ctx, s, []a2redis.Event{
			{Type: "order.created", Payload: json.RawMessage(`{"order":"` + s + `","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"total":"59.90"}`),
				Targets: []a2redis.Target{{Consumer: "mailer"}, {Consumer: "biller", Lane: "billing"}}},
			{Type: "order.paid", Payload: json.RawMessage(`{"amount":"59.90","via":"card"}`),
				Targets: []a2redis.Target{{Consumer: "biller", Lane: "billing"}}},
		}, redisstore.AppendOptions{Consumers: served})
		require.NoError(t, err)
	}
	for _, s := range []string{"order-1001", "order-1003"} {
		claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: s, Holder: "worker-demo", TTL: time.Minute, Consumers: served})
		require.NoError(t, err)
		for _, h := range claim.Heads {
			switch h.Consumer {
			case "biller":
				_, err = store.FailAttempt(ctx, redisstore.FailRequest{Session: s, Head: h.Ref(), Attempt: h.Attempts, Error: "card declined: insufficient funds", MaxFailures: 1})
			case "mailer":
				_, err = store.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: s, Head: h.Ref(), Attempt: h.Attempts,
					Events: []a2redis.Event{{Type: "mail.sent", Payload: json.RawMessage(`{"to":"customer@example.com"}`)}}, Consumers: served})
			}
			require.NoError(t, err)
		}
	}
	_, err = presence.New(store).Set(ctx, "order-1001", "alice", map[string]json.RawMessage{"viewing": json.RawMessage(`{"tab":"payments"}`)},
		presence.Meta{Seen: 1, At: time.Now(), TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, workerreg.Of(store).Register(ctx, redisstore.WorkerInfo{ID: "worker-demo", Host: "app-1", PID: 4242, StartedAt: time.Now().Add(-time.Hour),
		Consumers: []string{"mailer", "biller"}, Concurrency: 8, InFlight: 1, HeadsTotal: 1,
		Heads: []redisstore.WorkerHead{{Session: "order-1002", HeadRef: a2redis.HeadRef{Consumer: "mailer", Index: 1}}}}, time.Minute))
	return store
}

// text returns the text of the first node matching sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))))
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err)
	return s
}

// waitText polls until the text of sel contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel), chromedp.AtLeast(0)))
		if err == nil && strings.Contains(s, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q (last %q, %v)", sel, want, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDashboardInChromium(t *testing.T) {
	ctx := browser(t)
	client := redistest.Server(t)
	prefix := redistest.Prefix(t)
	store := fill(t, ctx, client, prefix)
	base := serve(t, "redis://"+redistest.ServerAddr(t), prefix, "--allow-writes")

	// The overview counts per consumer; the shards page lists the
	// sessions with work.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base)))
	require.Contains(t, text(t, ctx, "#consumers"), "biller")
	require.Equal(t, "1", text(t, ctx, "#workers-alive"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"shards")))
	require.Contains(t, text(t, ctx, "#ready"), "order-1002")
	require.Contains(t, text(t, ctx, "#dead-sessions"), "order-1001")
	require.Contains(t, text(t, ctx, "#consumers"), "mailer", "event cursors are read past the lane cursors page")

	// Search by id prefix.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#search"), "invoice-"),
		chromedp.Submit(chromedp.CSS("#search")),
		chromedp.WaitVisible(chromedp.CSS("#sessions"))))
	found := text(t, ctx, "#sessions")
	require.Contains(t, found, "invoice-7")
	require.NotContains(t, found, "order-1001")

	// The session page: log, cursors, dead letter, presence.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"session?id=order-1001")))
	require.Contains(t, text(t, ctx, "#log"), `"sku": "A-1"`, "payloads pretty-printed")
	require.Contains(t, text(t, ctx, "#dead"), "card declined")
	require.Contains(t, text(t, ctx, "#presence"), "alice")
	billing := `#cursors tr[data-lane="billing"] .state`
	require.Equal(t, "dead", text(t, ctx, billing))

	// Live tail: a new event appears.
	waitText(t, ctx, "#tail-status", "following")
	_, err := store.Append(ctx, "order-1001", []a2redis.Event{{Type: "order.shipped", Payload: json.RawMessage(`{"carrier":"dhl"}`)}}, redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)
	waitText(t, ctx, "#tail", "order.shipped")

	// Redrive the dead letter: confirm, then the cursor moves on.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#dead button.retry")),
		chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	require.Contains(t, text(t, ctx, "#confirm-heads"), "billing")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#no-dead"))))
	require.Equal(t, "ready", text(t, ctx, billing))
	p, err := store.DeadLettersPage(ctx, "order-1001", redisstore.PageRequest{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, p.DeadLetters)

	// Bulk: tick the dead letters, skip them, confirm.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"session?id=order-1003")))
	require.Equal(t, "dead", text(t, ctx, billing))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#dead input[name="h"]`)),
		chromedp.Click(chromedp.CSS("#skip-selected")),
		chromedp.WaitVisible(chromedp.CSS("#confirm"))))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#no-dead"))))
	require.Equal(t, "ready", text(t, ctx, billing), "skipped: the lane moves on to order.paid")
	require.Equal(t, "1", text(t, ctx, `#cursors tr[data-lane="billing"] .position`))
}

// failAcross dead-letters biller's head of a new session with msg.
func failAcross(t *testing.T, ctx context.Context, store *redisstore.Store, session, msg string) {
	t.Helper()
	_, err := store.Append(ctx, session, []a2redis.Event{{Type: "ticket.opened", Payload: json.RawMessage(`{}`),
		Targets: []a2redis.Target{{Consumer: "biller", Lane: "billing"}}}}, redisstore.AppendOptions{Consumers: served})
	require.NoError(t, err)
	claim, err := store.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: session, Holder: "worker-demo", TTL: time.Minute, Consumers: []a2redis.Consumer{biller}})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 1)
	h := claim.Heads[0]
	_, err = store.FailAttempt(ctx, redisstore.FailRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Error: msg, MaxFailures: 1})
	require.NoError(t, err)
}

// bulk clicks one of the dead-letter page's bulk buttons, confirms, and
// waits for the run to end; it returns how many it redrove.
func bulk(t *testing.T, ctx context.Context, button, wantConfirm string) string {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(button)),
		chromedp.WaitVisible(chromedp.CSS("#bulk-confirm"))))
	require.Contains(t, text(t, ctx, "#bulk-confirm-text"), wantConfirm)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#bulk-confirm")),
		chromedp.WaitVisible(chromedp.CSS("#job"))))
	waitText(t, ctx, "#job-state", "done")
	return text(t, ctx, "#job-redriven")
}

func TestDashboardFleetInChromium(t *testing.T) {
	ctx := browser(t)
	client := redistest.Server(t)
	prefix := redistest.Prefix(t)
	store := fill(t, ctx, client, prefix)
	failAcross(t, ctx, store, "ticket-1", "upstream timeout")
	failAcross(t, ctx, store, "ticket-2", "upstream timeout")
	base := serve(t, "redis://"+redistest.ServerAddr(t), prefix, "--allow-writes")

	// The overview: counts per consumer and the charts drawn from the
	// serving process's samples.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base)))
	require.Equal(t, "4", text(t, ctx, "#dead-total"))
	require.Equal(t, "4", text(t, ctx, `#consumers tr[data-consumer="biller"] .deadcount`))
	require.Equal(t, "1", text(t, ctx, `#consumers tr[data-consumer="mailer"] .inflight`), "the worker's record holds mailer's head of order-1002")
	require.Contains(t, text(t, ctx, "#chart-source"), "serving process")
	for _, chart := range []string{"#chart-throughput", "#chart-failures", "#chart-backlog"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS(chart+` polyline.series[data-consumer="biller"]`))), chart)
	}
	waitText(t, ctx, "#chart-legend", "biller")

	// The dead-letter page across sessions, filtered by error text.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"dead")))
	all := text(t, ctx, "#dead-across")
	require.Contains(t, all, "order-1001")
	require.Contains(t, all, "ticket-2")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#filter-error"), "timeout"),
		chromedp.Click(chromedp.CSS("#filter-apply")),
		// The filtered page, not the one the click left: only it carries
		// the filter in its bulk form (the old page's table already held
		// ticket-1, so waiting for that text raced the navigation).
		chromedp.WaitReady(chromedp.CSS(`#bulk input[name="error"][value="timeout"]`))))
	waitText(t, ctx, "#dead-across", "ticket-1")
	filtered := text(t, ctx, "#dead-across")
	require.Contains(t, filtered, "ticket-2")
	require.NotContains(t, filtered, "order-1001")

	// Bulk retry of the filter, then of everything left: 0 dead letters.
	require.Equal(t, "2", bulk(t, ctx, "#bulk-retry", "retry 2 dead letters"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"dead")))
	require.Contains(t, text(t, ctx, "#dead-across"), "order-1003")
	require.Equal(t, "2", bulk(t, ctx, "#bulk-retry", "retry 2 dead letters"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#job-dead")), chromedp.WaitVisible(chromedp.CSS("#no-dead-across"))))
	left, err := store.DeadLettersAcross(ctx, redisstore.DeadLetterQuery{Limit: 100})
	require.NoError(t, err)
	require.Empty(t, left.DeadLetters)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base)))
	require.Equal(t, "0", text(t, ctx, "#dead-total"))

	// The shards moved to their details page.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"shards")))
	require.Contains(t, text(t, ctx, "#shards"), "Oldest ready")
	require.Contains(t, text(t, ctx, "#ready"), "order-1002")
}

// TestScreenshots writes the README's screenshots when A2REDIS_SCREENSHOTS
// names a directory (make screenshots).
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("A2REDIS_SCREENSHOTS")
	if dir == "" {
		t.Skip("set A2REDIS_SCREENSHOTS to a directory (make screenshots)")
	}
	ctx := browser(t)
	client := redistest.Server(t)
	prefix := "demo-" + redisstore.RandomID()
	store := fill(t, ctx, client, prefix)
	failAcross(t, ctx, store, "ticket-1", "upstream timeout after 30s")
	base := serve(t, "redis://"+redistest.ServerAddr(t), prefix, "--allow-writes")
	for _, shot := range []struct{ path, file, ready string }{
		{"", "dashboard-overview.png", "#chart-backlog polyline.series"},
		{"dead", "dashboard-dead.png", "#dead-across"},
		{"shards", "dashboard-shards.png", "#ready"},
		{"session?id=order-1001", "dashboard-session.png", "#log"},
	} {
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Navigate(base+shot.path),
			chromedp.WaitReady(chromedp.CSS(shot.ready)),
			chromedp.Sleep(500*time.Millisecond)))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, shot.file), png, 0o644))
	}
}
