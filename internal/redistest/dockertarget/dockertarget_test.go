package dockertarget_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis/internal/redistest/dockertarget"
)

func TestStartPing(t *testing.T) {
	start := time.Now()
	addr := dockertarget.Start(t, "redis:7-alpine")
	t.Logf("container up at %s after %v", addr, time.Since(start))

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Do(ctx, c.B().Ping().Build()).Error())
}
