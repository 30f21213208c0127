package redisstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
)

// A coalesced round is one script call, so it is held to what one batch
// may carry: at most a2redis.MaxBatch events and a2redis.MaxBatchTargets
// targets, however many small appends wait in the line; the calls left
// over wait for the next round, in order.
func TestCoalescedRoundStaysWithinOneBatch(t *testing.T) {
	call := func(events, targetsEach int) *plainCall {
		c := &plainCall{ctx: context.Background(), batch: make([]prepared, events), heads: make([][]string, events), done: make(chan struct{})}
		for i := range c.heads {
			c.heads[i] = make([]string, targetsEach)
		}
		return c
	}
	rounds := func(line *plainLine) (sizes [][2]int) {
		for {
			group := takeRound(line)
			if group == nil {
				return sizes
			}
			events, targets := 0, 0
			for _, c := range group {
				events += len(c.batch)
				targets += c.targets()
			}
			sizes = append(sizes, [2]int{events, targets})
		}
	}
	// Single events of 45% of MaxBatchTargets each: two to a round.
	each := a2redis.MaxBatchTargets * 45 / 100
	line := &plainLine{}
	for range 5 {
		line.queue = append(line.queue, call(1, each))
	}
	require.Equal(t, [][2]int{{2, 2 * each}, {2, 2 * each}, {1, each}}, rounds(line))
	// Batches of 16 untargeted events: MaxBatch/16 to a round.
	line = &plainLine{}
	for range 100 {
		line.queue = append(line.queue, call(coalesceBatchLimit, 0))
	}
	per := a2redis.MaxBatch / coalesceBatchLimit
	got := rounds(line)
	require.Equal(t, [2]int{per * coalesceBatchLimit, 0}, got[0])
	for _, r := range got {
		require.LessOrEqual(t, r[0], a2redis.MaxBatch)
	}
}
