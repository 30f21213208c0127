package inspect

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// repair-session mends a session wedged by hand (a log entry above its
// counter): declined, it leaves the session wedged; confirmed, appends work
// again; on a healthy session it does nothing.
func TestRepairSession(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	_, err := e.store.Append(e.ctx, "w", []a2redis.Event{{Type: "t"}, {Type: "t"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	log := keys.For(c.prefix, "w").Log()
	require.NoError(t, e.client.Do(e.ctx, e.client.B().Xadd().Key(log).Id("3-0").FieldValue().
		FieldValue("id", "lost").FieldValue("type", "t").FieldValue("payload", "null").FieldValue("created_at", "1").Build()).Error())
	lost := []a2redis.Event{{ID: "lost", Type: "t"}}
	_, err = e.store.Append(e.ctx, "w", lost, redisstore.AppendOptions{})
	require.Error(t, err, "wedged")

	r := c.run(t, "n\n", "repair-session", "w")
	line := r.failed(t, ExitError)
	assert.Contains(t, r.stderr, `Remove every log entry above index 2 (the session's counter) of session "w" and rebuild its log? [y/N]`)
	assert.Contains(t, line, "not repaired")
	_, err = e.store.Append(e.ctx, "w", lost, redisstore.AppendOptions{})
	require.Error(t, err, "still wedged")

	out := c.run(t, "", "--json", "repair-session", "w", "--yes").ok(t)
	assert.JSONEq(t, `{"session":"w","head":2,"removed":[3],"copied":2}`, out)
	res, err := e.store.Append(e.ctx, "w", lost, redisstore.AppendOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Events[0].Index)

	out = c.run(t, "y\n", "repair-session", "w").ok(t)
	assert.Contains(t, out, `session "w" is not wedged: its log ends at its counter (3); nothing done`)
}
