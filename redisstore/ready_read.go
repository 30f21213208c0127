package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/keys"
)

// ReadyShards returns how many shards the store's ready index has.
func (s *Store) ReadyShards() int { return s.cfg.ReadyShards }

// ReadySession is one session the ready index lists.
type ReadySession struct {
	// Session is the session id.
	Session string
	// Shard is the index shard that lists it.
	Shard int
	// At is the time it has work from: not after now when a head is
	// claimable now (the time it got work, or was last claimed from while
	// more was left), else when the earliest claim or retry hold ends.
	At time.Time
}

// ReadyPage lists up to limit sessions of one index shard with work from at
// or after `after` (zero: from the earliest), earliest first, and the
// continuation to pass as after for the next page (zero when the shard has
// no more). Sessions sharing one time are listed whole on one page, so a
// page may hold more than limit.
func (s *Store) ReadyPage(ctx context.Context, shard int, after time.Time, limit int) ([]ReadySession, time.Time, error) {
	if shard < 0 || shard >= s.cfg.ReadyShards {
		return nil, time.Time{}, check.Invalid("shard", "must be in [0, %d) (got %d)", s.cfg.ReadyShards, shard)
	}
	if limit <= 0 {
		return nil, time.Time{}, check.Invalid("limit", "must be positive (got %d)", limit)
	}
	min := "-inf"
	if !after.IsZero() {
		min = strconv.FormatInt(after.UnixMilli(), 10)
	}
	c, key := s.client, keys.ReadyFor(s.cfg.Prefix, shard).Index()
	entries, err := s.do(ctx, c.B().Zrange().Key(key).Min(min).Max("+inf").Byscore().Limit(0, int64(limit)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
	}
	out := make([]ReadySession, 0, len(entries))
	for _, e := range entries {
		out = append(out, ReadySession{Session: e.Member, Shard: shard, At: time.UnixMilli(int64(e.Score))})
	}
	if len(entries) < limit {
		return out, time.Time{}, nil
	}
	// The next page starts after the last time; finish that time here.
	last := int64(entries[len(entries)-1].Score)
	rest, err := s.do(ctx, c.B().Zrangebyscore().Key(key).Min(strconv.FormatInt(last, 10)).Max(strconv.FormatInt(last, 10)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
	}
	seen := make(map[string]bool, len(out))
	for _, r := range out {
		seen[r.Session] = true
	}
	for _, e := range rest {
		if !seen[e.Member] {
			out = append(out, ReadySession{Session: e.Member, Shard: shard, At: time.UnixMilli(last)})
		}
	}
	return out, time.UnixMilli(last + 1), nil
}

// ReadyShardStats is one index shard's summary.
type ReadyShardStats struct {
	// Shard is the shard number.
	Shard int
	// Due is how many of its sessions have work claimable now.
	Due int64
	// Held is how many have work only once a claim or retry hold ends.
	Held int64
	// Oldest is the earliest time among its due sessions (zero when none):
	// now − Oldest is how long the longest-waiting session has waited.
	Oldest time.Time
	// Next is the earliest time a held session's work frees (zero when none).
	Next time.Time
}

// ReadyStats summarizes every shard of the ready index: a few commands per
// shard, whatever the number of sessions.
func (s *Store) ReadyStats(ctx context.Context) ([]ReadyShardStats, error) {
	now := strconv.FormatInt(s.now(), 10)
	c := s.client
	cmds := make(rueidis.Commands, 0, 4*s.cfg.ReadyShards)
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		key := keys.ReadyFor(s.cfg.Prefix, shard).Index()
		cmds = append(cmds,
			c.B().Zcount().Key(key).Min("-inf").Max(now).Build(),
			c.B().Zcount().Key(key).Min("("+now).Max("+inf").Build(),
			c.B().Zrange().Key(key).Min("0").Max("0").Withscores().Build(),
			c.B().Zrange().Key(key).Min("("+now).Max("+inf").Byscore().Limit(0, 1).Withscores().Build())
	}
	replies := s.doMulti(ctx, cmds...)
	out := make([]ReadyShardStats, s.cfg.ReadyShards)
	for shard := range out {
		st := ReadyShardStats{Shard: shard}
		var err error
		if st.Due, err = replies[4*shard].AsInt64(); err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if st.Held, err = replies[4*shard+1].AsInt64(); err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		first, err := replies[4*shard+2].AsZScores()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if st.Due > 0 && len(first) > 0 {
			st.Oldest = time.UnixMilli(int64(first[0].Score))
		}
		next, err := replies[4*shard+3].AsZScores()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading ready index shard %d: %w", shard, err)
		}
		if len(next) > 0 {
			st.Next = time.UnixMilli(int64(next[0].Score))
		}
		out[shard] = st
	}
	return out, nil
}

// ReadyState is what the ready index lists for one session.
type ReadyState struct {
	// Listed reports that the index lists the session: it has work.
	Listed bool
	// Due reports that its work is claimable now (At is not after now).
	Due bool
	// At is the time it has work from (see ReadySession.At); zero when not
	// listed.
	At time.Time
}

// ReadyAt returns what the ready index lists for session: one command on
// the session's shard.
func (s *Store) ReadyAt(ctx context.Context, session string) (ReadyState, error) {
	if err := checkSession(session); err != nil {
		return ReadyState{}, err
	}
	c := s.client
	key := keys.ReadyFor(s.cfg.Prefix, keys.ReadyShard(session, s.cfg.ReadyShards)).Index()
	score, err := s.do(ctx, c.B().Zscore().Key(key).Member(session).Build()).AsFloat64()
	if rueidis.IsRedisNil(err) {
		return ReadyState{}, nil
	}
	if err != nil {
		return ReadyState{}, fmt.Errorf("a2redis: reading the ready index for session %q: %w", session, err)
	}
	at := int64(score)
	return ReadyState{Listed: true, Due: at <= s.now(), At: time.UnixMilli(at)}, nil
}
