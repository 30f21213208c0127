package inspect

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// rates shows each registered consumer's running window, or names one.
func TestRates(t *testing.T) {
	t.Parallel()
	e := serverEnv(t)
	c := e.cli
	err := e.store.AddConsumers(e.ctx, a2redis.Consumer{Name: "mailer"}, a2redis.Consumer{Name: "billing"})
	require.NoError(t, err)
	g, err := e.store.TakeStarts(e.ctx, "mailer", redisstore.RateLimit{Starts: 10, Per: time.Hour}, 3)
	require.NoError(t, err)
	require.Equal(t, 3, g.Starts)

	var docs []rateJSON
	for _, line := range strings.Split(strings.TrimSpace(c.run(t, "", "rates", "--json").ok(t)), "\n") {
		var d rateJSON
		parseJSON(t, line, &d)
		docs = append(docs, d)
	}
	byName := map[string]rateJSON{}
	for _, d := range docs {
		byName[d.Consumer] = d
	}
	assert.Equal(t, 3, byName["mailer"].Starts)
	assert.Positive(t, byName["mailer"].EndsInMS)
	assert.Equal(t, rateJSON{Consumer: "billing"}, byName["billing"])
	out := c.run(t, "", "rates", "billing").ok(t)
	assert.Contains(t, out, "no window")
	assert.NotContains(t, out, "mailer")
}
