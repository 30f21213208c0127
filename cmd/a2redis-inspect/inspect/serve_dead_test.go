package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/stretchr/testify/require"
)

// postTo posts form to path and returns the status, the Location and the
// body.
func postForm(t *testing.T, srv *httptest.Server, path string, form url.Values) (int, string, string) {
	t.Helper()
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(srv.URL+path, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// deadAcross fills n sessions, each with one dead letter of biller whose
// error is "timeout" for even sessions and "declined" for odd ones.
func deadAcross(t *testing.T, e *env, n int) {
	t.Helper()
	for i := range n {
		s := fmt.Sprintf("dl-%02d", i)
		_, err := e.store.Append(e.ctx, s, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "biller", Lane: "billing"}}}}, redisstore.AppendOptions{Consumers: served})
		require.NoError(t, err)
		claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: s, Holder: "w", TTL: time.Minute, Consumers: []a2redis.Consumer{biller}})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 1)
		h := claim.Heads[0]
		msg := "upstream timeout"
		if i%2 == 1 {
			msg = "card declined"
		}
		_, err = e.store.FailAttempt(e.ctx, redisstore.FailRequest{Session: s, Head: h.Ref(), Attempt: h.Attempts, Error: msg, MaxFailures: 1})
		require.NoError(t, err)
	}
}

func deadAcrossCount(t *testing.T, e *env, errText string) int {
	t.Helper()
	n := 0
	q := redisstore.DeadLetterQuery{Error: errText, Limit: 100}
	for {
		p, err := e.store.DeadLettersAcross(e.ctx, q)
		require.NoError(t, err)
		n += len(p.DeadLetters)
		if p.Next == "" {
			return n
		}
		q.After = p.Next
	}
}

func TestServeDeadLettersAcross(t *testing.T) {
	for _, target := range []string{"miniredis", "redis-server", "cluster"} {
		t.Run(target, func(t *testing.T) {
			e := targetEnv(t, target)
			deadAcross(t, e, 6)
			ro := dashServer(t, e, serveOptions{})
			srv := dashServer(t, e, serveOptions{allowWrites: true})

			// The overview counts them per consumer.
			_, body := get(t, srv, "/")
			require.Contains(t, body, `<b id="dead-total">6</b>`)
			require.Contains(t, body, `<b id="dead-sessions">6</b> sessions`)
			require.Contains(t, body, `<a href="/dead?consumer=biller">6</a>`)

			// The filter by error text.
			code, body := get(t, srv, "/dead?error=timeout")
			require.Equal(t, http.StatusOK, code, body)
			require.Equal(t, 3, strings.Count(body, "upstream timeout</td>"))
			require.NotContains(t, body, "card declined</td>")
			_, body = get(t, srv, "/dead?consumer=mailer")
			require.Contains(t, body, `id="no-dead-across"`)

			// Read-only: no bulk form, and the POST is refused.
			_, page := get(t, ro, "/dead")
			require.NotContains(t, page, `id="bulk"`)
			code, _, _ = postForm(t, ro, "/dead/redrive", url.Values{"action": {"retry"}})
			require.Equal(t, http.StatusForbidden, code)

			// Bulk retry of the timeouts: confirm, run, progress to done.
			_, page = get(t, srv, "/dead?error=timeout")
			csrf := csrfOf(t, page)
			form := url.Values{"csrf": {csrf}, "action": {"retry"}, "error": {"timeout"}}
			code, _, body = postForm(t, srv, "/dead/redrive", form)
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, `id="bulk-confirm"`)
			require.Contains(t, body, "retry 3 dead letters")
			require.Equal(t, 3, deadAcrossCount(t, e, "timeout"), "nothing redriven before the confirmation")
			form.Set("confirm", "1")
			code, loc, body := postForm(t, srv, "/dead/redrive", form)
			require.Equal(t, http.StatusSeeOther, code, body)
			require.True(t, strings.HasPrefix(loc, "/dead/job?id="), loc)
			var v jobView
			require.Eventually(t, func() bool {
				_, b := get(t, srv, strings.Replace(loc, "/dead/job?", "/dead/job.json?", 1))
				require.NoError(t, json.Unmarshal([]byte(b), &v))
				return v.Done
			}, 20*time.Second, 20*time.Millisecond)
			require.Empty(t, v.Failed)
			require.Equal(t, 3, v.Redriven)
			require.Equal(t, 3, v.Sessions)
			require.Equal(t, 0, deadAcrossCount(t, e, "timeout"))
			require.Equal(t, 3, deadAcrossCount(t, e, "declined"), "the filter's others are left alone")
			_, body = get(t, srv, loc)
			require.Contains(t, body, `<span id="job-state">done</span>`)
		})
	}
}

func TestHistoryRates(t *testing.T) {
	var h history
	t0 := time.UnixMilli(1_000_000)
	h.add(fleetStats{At: t0, Consumers: []consumerStats{{Consumer: "c", Due: 2, Held: 1, Completed: 10, Failed: 4}}})
	require.Zero(t, h.rates()["c"].CompletedPerMin, "no rate without a sample before")
	require.Equal(t, int64(3), h.rates()["c"].Backlog)
	h.add(fleetStats{At: t0.Add(30 * time.Second), Consumers: []consumerStats{{Consumer: "c", Completed: 40, Failed: 5}}})
	require.Equal(t, 60.0, h.rates()["c"].CompletedPerMin)
	require.Equal(t, 2.0, h.rates()["c"].FailedPerMin)
	h.add(fleetStats{At: t0.Add(60 * time.Second), Consumers: []consumerStats{{Consumer: "c", Completed: 1}}})
	require.Zero(t, h.rates()["c"].CompletedPerMin, "a total that went down gives no rate")
	for i := range historyLen + 5 {
		h.add(fleetStats{At: t0.Add(time.Duration(i+2) * time.Minute)})
	}
	require.Len(t, h.list(), historyLen, "an hour of samples at most")
	require.False(t, h.due(t0.Add(time.Duration(historyLen+6)*time.Minute)))
	require.True(t, h.due(t0.Add(time.Duration(historyLen+6)*time.Minute+sampleEvery)))
}
