package inspect

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

var cancelButton = regexp.MustCompile(`<button class="cancel" name="h" value="([^"]+)">`)

// postCancel posts form to /cancel from the dashboard's own origin.
func postCancel(t *testing.T, srvURL string, c *http.Client, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srvURL+"/cancel", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srvURL)
	cl := *c
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The session page offers Cancel on each cursor's head with --allow-writes
// (none read-only); a cancel is refused without the CSRF token, asks for
// confirmation, then skips the head.
func TestServeCancel(t *testing.T) {
	e := serverEnv(t)
	_, err := e.store.Append(e.ctx, "c1", []a2redis.Event{
		{Type: "job", Targets: []a2redis.Target{{Consumer: "mailer"}}},
		{Type: "job", Targets: []a2redis.Target{{Consumer: "mailer"}}, NotBefore: e.clock.Now().Add(time.Hour)},
	}, redisstore.AppendOptions{})
	require.NoError(t, err)

	ro := dashServer(t, e, serveOptions{})
	_, page := get(t, ro, "/session?id=c1")
	require.NotRegexp(t, cancelButton, page, "read-only: no cancel")

	srv := dashServer(t, e, serveOptions{allowWrites: true})
	_, page = get(t, srv, "/session?id=c1")
	buttons := cancelButton.FindAllStringSubmatch(page, -1)
	require.Len(t, buttons, 2, "one per head")
	key := html.UnescapeString(buttons[1][1])
	require.Equal(t, url.Values{"c": {"mailer"}, "l": {""}, "i": {"2"}}.Encode(), key)
	form := url.Values{"session": {"c1"}, "h": {key}}
	code, _ := postCancel(t, srv.URL, srv.Client(), form)
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")
	form.Set("csrf", csrfOf(t, page))
	code, body := postCancel(t, srv.URL, srv.Client(), form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="confirm"`)
	cursors, err := e.store.Cursors(e.ctx, "c1")
	require.NoError(t, err)
	require.Len(t, cursors, 2, "not confirmed: nothing written")

	form.Set("confirm", "yes")
	code, body = postCancel(t, srv.URL, srv.Client(), form)
	require.Equal(t, http.StatusSeeOther, code, body)
	cursors, err = e.store.Cursors(e.ctx, "c1")
	require.NoError(t, err)
	require.Len(t, cursors, 1)
	require.Equal(t, int64(1), cursors[0].Head, "the scheduled head 2 was cancelled")
}
