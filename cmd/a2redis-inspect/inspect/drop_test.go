package inspect

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

func TestDrop(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	killLane(t, e, "s")
	bounds := func() redisstore.Bounds {
		b, err := e.store.Bounds(e.ctx, "s")
		require.NoError(t, err)
		return b
	}

	for _, answer := range []string{"", "n\n", "maybe\n"} {
		r := c.run(t, answer, "drop", "s")
		line := r.failed(t, ExitError)
		assert.Contains(t, r.stderr, `Drop session "s" (head 2, cleared at 0) and everything it holds? [y/N]`)
		assert.Contains(t, line, "not dropped")
		assert.Equal(t, redisstore.Bounds{Head: 2}, bounds(), "declined (%q): nothing changed", answer)
	}

	// Confirmed: the session is gone, and the inspector says so.
	r := c.run(t, "y\n", "drop", "s")
	assert.Contains(t, r.ok(t), `dropped: session "s" (2 log entries deleted)`)
	assert.Equal(t, redisstore.Bounds{}, bounds())
	c.run(t, "", "log", "s").failed(t, ExitError)
	c.run(t, "", "drop", "--yes", "s").failed(t, ExitError)

	// --yes and --json.
	_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "job"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	var doc dropJSON
	r = c.run(t, "", "drop", "--yes", "--json", "s")
	parseJSON(t, r.ok(t), &doc)
	assert.NotContains(t, r.stderr, "[y/N]")
	assert.Equal(t, dropJSON{Session: "s", DropResult: redisstore.DropResult{Dropped: true, ClearIndex: 2, Deleted: 1}}, doc)
}
