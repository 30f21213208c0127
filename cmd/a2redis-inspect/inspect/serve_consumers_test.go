package inspect

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/schedule"
)

// postTo posts form to path (as post does to /redrive), not following the
// redirect.
func postTo(t *testing.T, srv interface {
	Client() *http.Client
}, base, path string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeConsumersAndSchedules: the consumers page lists the registry and
// pauses and resumes (writes enabled, CSRF checked; read-only refuses); the
// schedules page lists what runners recorded.
func TestServeConsumersAndSchedules(t *testing.T) {
	e := serverEnv(t)
	require.NoError(t, e.store.AddConsumers(e.ctx, mailer, audit))
	ro := dashServer(t, e, serveOptions{})
	code, page := get(t, ro, "/consumers")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, `<td>mailer</td><td class="state-running">running</td>`)
	require.NotContains(t, page, "Pause</button>", "read-only: no buttons")
	code, _ = postTo(t, ro, ro.URL, "/consumer", url.Values{"csrf": {"x"}, "name": {"mailer"}, "action": {"pause"}})
	require.Equal(t, http.StatusForbidden, code)

	srv := dashServer(t, e, serveOptions{allowWrites: true})
	_, page = get(t, srv, "/consumers")
	token := csrfOf(t, page)
	code, _ = postTo(t, srv, srv.URL, "/consumer", url.Values{"csrf": {wrongToken(token)}, "name": {"mailer"}, "action": {"pause"}})
	require.Equal(t, http.StatusForbidden, code, "wrong CSRF token")
	code, body := postTo(t, srv, srv.URL, "/consumer", url.Values{"csrf": {token}, "name": {"mailer"}, "action": {"pause"}})
	require.Equal(t, http.StatusSeeOther, code, body)
	_, _, err := e.store.ReadConsumers(e.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"mailer"}, e.store.Paused())
	_, page = get(t, srv, "/consumers")
	require.Contains(t, page, `<td>mailer</td><td class="state-paused">paused</td>`)
	require.Contains(t, page, `value="resume"`)
	code, _ = postTo(t, srv, srv.URL, "/consumer", url.Values{"csrf": {token}, "name": {"mailer"}, "action": {"resume"}})
	require.Equal(t, http.StatusSeeOther, code)
	_, _, err = e.store.ReadConsumers(e.ctx)
	require.NoError(t, err)
	require.Empty(t, e.store.Paused())
	code, _ = postTo(t, srv, srv.URL, "/consumer", url.Values{"csrf": {token}, "name": {"mailer"}, "action": {"frob"}})
	require.Equal(t, http.StatusBadRequest, code)

	// Schedules.
	_, page = get(t, srv, "/schedules")
	require.Contains(t, page, "no schedules")
	runSchedules(t, e, "proc-7",
		schedule.Schedule{Name: "digest", Every: 15 * time.Millisecond, Session: "digests", Event: a2redis.Event{Type: "digest.due"}})
	_, page = get(t, srv, "/schedules")
	require.Contains(t, page, "<td>digest</td><td>every 15ms</td>")
	require.Contains(t, page, "proc-7")
}
