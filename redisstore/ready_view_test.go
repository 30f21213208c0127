package redisstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The view's choice of shards: at most claimNextShards a call, the shards
// known to have work earliest first (at most claimNextShards −
// claimNextWindow of them), and a window that reaches every shard within
// shards/claimNextWindow calls even when every shard is known to have work.
func TestReadyViewPick(t *testing.T) {
	const now = int64(1_000_000)
	for _, shards := range []int{1, 8, 9, 64, 256, 1024} {
		var v readyView
		v.init(shards)
		picked, _ := v.pick(shards, now, false)
		require.Len(t, picked, min(shards, claimNextShards), "%d shards, nothing known", shards)
		next, unread := v.next()
		assert.True(t, unread, "shards never read")
		assert.Equal(t, int64(viewNone), next)

		// Every shard known to have work, the older the higher its number.
		for shard := range shards {
			v.lower(shard, now-int64(shard))
		}
		_, unread = v.next()
		assert.False(t, unread, "every shard known")
		if shards > claimNextShards {
			picked, seen := v.pick(shards, now, false)
			require.Len(t, picked, claimNextShards)
			for i := range claimNextShards - claimNextWindow {
				assert.Equal(t, shards-1-i, picked[i], "%d shards: the earliest known first", shards)
				assert.Equal(t, now-int64(shards-1-i), seen[i])
			}
		}
		// However the view ranks them, the window reads every shard within
		// shards/claimNextWindow calls.
		read := map[int]bool{}
		calls := 0
		for len(read) < shards {
			calls++
			require.LessOrEqual(t, calls, max(1, (shards+claimNextWindow-1)/claimNextWindow), "%d shards: every shard read within shards/%d calls", shards, claimNextWindow)
			picked, _ := v.pick(shards, now, false)
			require.LessOrEqual(t, len(picked), claimNextShards)
			for _, p := range picked {
				read[p] = true
			}
		}
		all, _ := v.pick(shards, now, true)
		assert.Len(t, all, shards, "AllShards")
	}
}

// What a read teaches the view, and what it does not unlearn: a note or a
// hint that arrived while the read was out keeps the earlier time.
func TestReadyViewLearn(t *testing.T) {
	const now = int64(1_000_000)
	var v readyView
	v.init(16)
	_, seen := v.pick(16, now, true)
	v.learn(3, seen[3], viewNone)
	assert.Equal(t, int64(viewNone), v.want[3].Load(), "read empty")
	v.hint(3, now)
	assert.Equal(t, now, v.want[3].Load(), "a hint makes it known")
	v.learn(3, viewNone, now+500) // a read that began before the hint
	assert.Equal(t, now, v.want[3].Load(), "the hint is kept")
	v.learn(3, now, now+500)
	assert.Equal(t, now+500, v.want[3].Load(), "a read after the hint moves it later")
	v.noteUpdates(3, 16, now, []readyUpdate{{session: "s", version: "2", at: "1000100", due: false}})
	assert.Equal(t, now+100, v.want[3].Load(), "a hold that ends earlier")
	v.noteUpdates(3, 16, now, []readyUpdate{{session: "s", version: "3", at: "999000", due: false}})
	assert.Equal(t, now+100, v.want[3].Load(), "work a session kept does not move it")
	v.noteUpdates(3, 16, now, []readyUpdate{{session: "s", version: "4", at: "999000", due: true}})
	assert.Equal(t, int64(999000), v.want[3].Load(), "new work does")
	v.noteUpdates(3, 16, now, []readyUpdate{{session: "s", version: "5", at: ""}})
	assert.Equal(t, int64(999000), v.want[3].Load(), "a session that left does not")
}
