package inspect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// head shows a head's state while its cursor stands on it, and how it was
// done once the cursor moved past: completed (by which attempt),
// cancelled, or not reached yet.
func TestHead(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
	}, redisstore.AppendOptions{})
	require.NoError(t, err)
	claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 1)

	var doc headJSON
	parseJSON(t, c.run(t, "", "head", "--json", "--lane", "x", "s", "c", "1").ok(t), &doc)
	assert.Equal(t, headJSON{Session: "s", Consumer: "c", Lane: "x", Index: 1, State: "claimed", Attempt: 1}, doc)

	_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: claim.Heads[0].Ref(), Attempt: 1})
	require.NoError(t, err)
	res, err := e.store.Cancel(e.ctx, redisstore.CancelRequest{Session: "s", Consumer: "c", Lane: "x", Index: 2})
	require.NoError(t, err)
	require.Equal(t, redisstore.Cancelled, res.Outcome)

	doc = headJSON{}
	parseJSON(t, c.run(t, "", "head", "--json", "--lane", "x", "s", "c", "1").ok(t), &doc)
	assert.Equal(t, "completed", doc.State)
	assert.Equal(t, int64(1), doc.Attempt)
	assert.NotEmpty(t, doc.At)
	out := c.run(t, "", "head", "--lane", "x", "s", "c", "2").ok(t)
	assert.Contains(t, out, `"s" head 2 of consumer "c" lane "x": cancelled at `)
	assert.Contains(t, c.run(t, "", "head", "--lane", "x", "s", "c", "3").ok(t), ": ready")
	assert.Contains(t, c.run(t, "", "head", "--lane", "x", "s", "c", "9").ok(t), ": not-reached")
	c.run(t, "", "head", "s", "c", "0").failed(t, ExitUsage)
}
