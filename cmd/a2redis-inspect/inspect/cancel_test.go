package inspect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// cancel asks first, cancels a claimed lane head (its running attempt's
// completion is then superseded and the lane moves on), and refuses a
// head that is not there and a dead letter without asking.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	_, err := e.store.Append(e.ctx, "s", []a2redis.Event{
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
		{Type: "job", Targets: []a2redis.Target{{Consumer: "c", Lane: "x"}}},
	}, redisstore.AppendOptions{})
	require.NoError(t, err)
	claim, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claim.Heads, 1)

	for _, answer := range []string{"", "n\n"} {
		r := c.run(t, answer, "cancel", "s", "c", "1")
		line := r.failed(t, ExitError)
		assert.Contains(t, r.stderr, `Cancel the lane head of consumer "c" lane "x" at index 1 (claimed by "w", attempt 1) in session "s"? [y/N]`)
		assert.Contains(t, line, "not cancelled")
	}
	r := c.run(t, "y\n", "cancel", "s", "c", "2")
	assert.Contains(t, r.failed(t, ExitError), `consumer "c" has no head at index 2 in session "s"`)
	assert.NotContains(t, r.stderr, "[y/N]")

	var doc cancelJSON
	r = c.run(t, "", "cancel", "--yes", "--json", "s", "c", "1")
	parseJSON(t, r.ok(t), &doc)
	assert.Equal(t, cancelJSON{Session: "s", Consumer: "c", Lane: "x", Index: 1, Outcome: "cancelled", Attempts: 1, HasPending: true}, doc)
	done, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: claim.Heads[0].Ref(), Attempt: 1})
	require.NoError(t, err)
	assert.Equal(t, redisstore.CompleteSuperseded, done.Outcome)
	rows := byKey(parseTable(t, c.run(t, "", "cursors", "s").ok(t)), "CONSUMER")
	assert.Equal(t, "1", rows["c"]["POSITION"])
	assert.Equal(t, "2", rows["c"]["HEAD"])

	killHead(t, e, "s", 2)
	r = c.run(t, "y\n", "cancel", "s", "c", "2")
	assert.Contains(t, r.failed(t, ExitError), "is dead-lettered: use 'a2redis-inspect redrive s c 2 --skip'")
	assert.Equal(t, []string{"c@2"}, deadHeads(t, e, "s"))
}
