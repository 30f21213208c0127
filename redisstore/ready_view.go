package redisstore

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// What a store knows of its ready index, so that ClaimNext reads a bounded
// number of shards whatever Config.ReadyShards is. Per shard the view holds
// the earliest time (epoch ms) the shard may list claimable work: read from
// the shard itself, lowered by the store's own index updates (a session
// that got work, a hold that ends) and by the caller's hints (the shards
// wake-ups named). Like the index, the view may be early, never knowingly
// late: a shard it thinks has work early costs one read, which corrects it.
// Changes it cannot see (another process's holds, work announced to
// nobody here) are what the rotating window finds.

const (
	// claimNextShards is how many index shards one ClaimNext reads (every
	// shard when the index has no more), in one round trip.
	claimNextShards = 8
	// claimNextWindow is how many of those come from the store's rotating
	// window whatever else is known: every shard is read within
	// ReadyShards/claimNextWindow calls of one store, named or not.
	claimNextWindow = 4
	// claimNextPage is how many shards one round trip of a full pass
	// (ClaimNextRequest.AllShards) reads.
	claimNextPage = 64
)

// Per-shard view values besides a time: never read yet, and read with
// nothing listed.
const (
	viewUnread = 0
	viewNone   = math.MaxInt64
)

// readyView is a store's view of its ready index (see above).
type readyView struct {
	once   sync.Once
	want   []atomic.Int64 // per shard: a time, viewUnread or viewNone
	unread atomic.Int64   // shards the view knows nothing of yet
	cursor atomic.Uint64  // the rotating window's next shard
}

// init sizes the view; the window starts at a random shard so that stores
// started together do not read in step.
func (v *readyView) init(shards int) {
	v.once.Do(func() {
		v.want = make([]atomic.Int64, shards)
		v.unread.Store(int64(shards))
		v.cursor.Store(rand.Uint64N(uint64(shards)))
	})
}

// lower makes shard's time at most at.
func (v *readyView) lower(shard int, at int64) {
	w := &v.want[shard]
	for {
		old := w.Load()
		if old != viewUnread && old <= at {
			return
		}
		if w.CompareAndSwap(old, at) {
			if old == viewUnread {
				v.unread.Add(-1)
			}
			return
		}
	}
}

// hint marks shard as having work from now on (a wake-up named it).
func (v *readyView) hint(shard int, now int64) { v.lower(shard, now) }

// noteUpdates lowers the view with the store's own index updates of
// shard: new claimable work (the updates the shard announces) and holds
// that end. Work a session kept, or lost, does not move the view: the claim
// that made it re-reads the shard anyway.
func (v *readyView) noteUpdates(shard, shards int, now int64, updates []readyUpdate) {
	v.init(shards)
	for _, u := range updates {
		if u.at == "" {
			continue
		}
		at, err := strconv.ParseInt(u.at, 10, 64)
		if err != nil {
			continue
		}
		if u.due || at > now {
			v.lower(shard, at)
		}
	}
}

// pick returns the shards one ClaimNext reads, with the view's value of
// each before the read: every shard when there are at most
// claimNextShards (or all is set); else up to claimNextShards −
// claimNextWindow shards the view says may have work now, earliest first,
// and the rest from the rotating window.
func (v *readyView) pick(shards int, now int64, all bool) ([]int, []int64) {
	if all || shards <= claimNextShards {
		out := make([]int, shards)
		seen := make([]int64, shards)
		for i := range out {
			out[i], seen[i] = i, v.want[i].Load()
		}
		return out, seen
	}
	out := make([]int, 0, claimNextShards)
	seen := make([]int64, 0, claimNextShards)
	// The earliest known: a small insertion sort over the shards.
	const known = claimNextShards - claimNextWindow
	for i := range v.want {
		at := v.want[i].Load()
		if at == viewUnread || at == viewNone || at > now {
			continue
		}
		if len(out) == known && at >= seen[known-1] {
			continue
		}
		if len(out) < known {
			out, seen = append(out, i), append(seen, at)
		} else {
			out[known-1], seen[known-1] = i, at
		}
		for j := len(out) - 1; j > 0 && seen[j] < seen[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
			seen[j], seen[j-1] = seen[j-1], seen[j]
		}
	}
	// The window: the next shards in turn, passing over those picked.
	for tries := 0; len(out) < claimNextShards && tries < shards; tries++ {
		shard := int(v.cursor.Add(1) % uint64(shards))
		picked := false
		for _, p := range out {
			if p == shard {
				picked = true
				break
			}
		}
		if !picked {
			out, seen = append(out, shard), append(seen, v.want[shard].Load())
		}
	}
	return out, seen
}

// learn sets shard's value from a read that began when the view held
// seen: unless the view moved meanwhile (a note or a hint, which may be
// newer than the read), in which case it keeps the earlier of the two.
func (v *readyView) learn(shard int, seen, at int64) {
	if v.want[shard].CompareAndSwap(seen, at) {
		if seen == viewUnread {
			v.unread.Add(-1)
		}
		return
	}
	if at != viewNone {
		v.lower(shard, at)
	}
}

// next returns the earliest time the view lists (viewNone when nothing),
// and whether some shard was never read yet.
func (v *readyView) next() (int64, bool) {
	earliest := int64(viewNone)
	for i := range v.want {
		if at := v.want[i].Load(); at != viewUnread && at < earliest {
			earliest = at
		}
	}
	return earliest, v.unread.Load() > 0
}

// dueElsewhere reports whether a shard not in read may list work now, as
// far as the view knows (a shard never read may).
func (v *readyView) dueElsewhere(read []int, now int64) bool {
	if len(read) == len(v.want) {
		return false
	}
	if v.unread.Load() > 0 {
		return true
	}
	for i := range v.want {
		if at := v.want[i].Load(); at != viewNone && at <= now && !slices.Contains(read, i) {
			return true
		}
	}
	return false
}
