package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// MaxWorkerHeads is the most held heads a worker record lists
// (WorkerInfo.Heads); WorkerInfo.HeadsTotal counts them all.
const MaxWorkerHeads = 100

// workerPrune is how many expired members one registry write prunes from
// the listing at most.
const workerPrune = 100

// WorkerHead is one head a worker holds.
type WorkerHead struct {
	// Session is the head's session.
	Session string `json:"session"`
	a2redis.HeadRef
}

// WorkerInfo is what a running worker process tells the prefix about itself
// (RegisterWorker), as the worker registry holds it (Workers).
type WorkerInfo struct {
	// ID is the worker's id, the holder of its claims.
	ID string `json:"id"`
	// Host is the host it runs on.
	Host string `json:"host"`
	// PID is its process id.
	PID int `json:"pid"`
	// StartedAt is when it started.
	StartedAt time.Time `json:"-"`
	// Consumers are the consumers it handles.
	Consumers []string `json:"consumers"`
	// Concurrency is its handler slots.
	Concurrency int `json:"concurrency"`
	// InFlight is how many heads it held at its last heartbeat.
	InFlight int `json:"in_flight"`
	// Heads are up to MaxWorkerHeads of the heads it held.
	Heads []WorkerHead `json:"heads"`
	// HeadsTotal is how many heads it held (Heads may list fewer).
	HeadsTotal int `json:"heads_total"`
	// HeartbeatAt is when its record was last written (set by
	// RegisterWorker from the store's clock).
	HeartbeatAt time.Time `json:"-"`
	// ExpiresAt is when its record expires unless refreshed (set by
	// RegisterWorker: HeartbeatAt + the TTL).
	ExpiresAt time.Time `json:"-"`
}

// workerRecord is WorkerInfo as stored: times in epoch ms.
type workerRecord struct {
	WorkerInfo
	StartedAt   int64 `json:"started_at"`
	HeartbeatAt int64 `json:"heartbeat_at"`
	ExpiresAt   int64 `json:"expires_at"`
}

// RegisterWorker writes (or refreshes) a worker's record in the prefix's
// worker registry for ttl: the record expires, and leaves the listing,
// unless it is written again before. Call it every ttl/3 or so while the
// worker runs (the worker runtime does) and DeregisterWorker when it stops.
// One script call on the registry's slot; it also prunes a bounded number
// of expired members from the listing. Heads beyond MaxWorkerHeads are
// ErrInvalidArgument (HeadsTotal carries the full count).
func (s *Store) RegisterWorker(ctx context.Context, info WorkerInfo, ttl time.Duration) error {
	if err := check.Name("WorkerInfo.ID", info.ID); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return check.Invalid("ttl", "must be at least 1ms (got %v)", ttl)
	}
	if len(info.Heads) > MaxWorkerHeads {
		return check.Invalid("WorkerInfo.Heads", "lists %d heads, at most %d", len(info.Heads), MaxWorkerHeads)
	}
	if info.HeadsTotal < len(info.Heads) {
		info.HeadsTotal = len(info.Heads)
	}
	if info.Consumers == nil {
		info.Consumers = []string{}
	}
	if info.Heads == nil {
		info.Heads = []WorkerHead{}
	}
	now := s.now()
	rec := workerRecord{WorkerInfo: info, HeartbeatAt: now, ExpiresAt: now + ttl.Milliseconds()}
	if !info.StartedAt.IsZero() {
		rec.StartedAt = info.StartedAt.UnixMilli()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("a2redis: encoding worker %q: %w", info.ID, err)
	}
	if err := s.workerBeat(ctx, info.ID, now, ttl.Milliseconds(), string(b)); err != nil {
		return fmt.Errorf("a2redis: registering worker %q: %w", info.ID, err)
	}
	return nil
}

// DeregisterWorker removes a worker's record from the registry at once (a
// clean stop); a worker that dies without it disappears when its record
// expires.
func (s *Store) DeregisterWorker(ctx context.Context, id string) error {
	if err := check.Name("id", id); err != nil {
		return err
	}
	if err := s.workerBeat(ctx, id, s.now(), 0, ""); err != nil {
		return fmt.Errorf("a2redis: deregistering worker %q: %w", id, err)
	}
	return nil
}

func (s *Store) workerBeat(ctx context.Context, id string, now, ttl int64, record string) error {
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return err
	}
	lua := scripts.All()["worker_beat"].Lua(locking)
	k := []string{keys.Worker(s.cfg.Prefix, id), keys.Workers(s.cfg.Prefix), keys.WorkersSentinel(s.cfg.Prefix)}
	args := []string{id, itoa(now), itoa(ttl), record, itoa(workerPrune)}
	// Repeatable: the same call again writes the same record and expiry.
	return s.retrying(ctx, true, func(ctx context.Context) error {
		return lua.Exec(ctx, s.client, k, args).Error()
	})
}

// WorkerPage is one page of the live workers.
type WorkerPage struct {
	// Workers are the page's workers, the soonest to expire first.
	Workers []WorkerInfo
	// Next continues the listing (PageRequest.After); empty on the last
	// page.
	Next string
}

// Workers lists the live workers of the prefix page by page (req.Limit,
// default DefaultPageLimit, at most MaxPageLimit), the soonest to expire
// first: two reads of the registry per page, never a SCAN. A worker whose
// record expired by the store's clock is not listed, even before a write
// prunes it. A worker that heartbeats while the pages are read moves later
// in the order, so a long listing may show it twice (or, rarely, miss it
// once): dedupe by ID.
func (s *Store) Workers(ctx context.Context, req PageRequest) (WorkerPage, error) {
	limit, err := pageLimit(req)
	if err != nil {
		return WorkerPage{}, err
	}
	now := s.now()
	min := "(" + itoa(now)
	if req.After != "" {
		ms, err := strconv.ParseInt(req.After[1:], 10, 64)
		if req.After[0] != 'w' || err != nil {
			return WorkerPage{}, errAfter
		}
		if ms > now {
			min = "(" + itoa(ms)
		}
	}
	c, listing := s.client, keys.Workers(s.cfg.Prefix)
	entries, err := s.do(ctx, c.B().Zrange().Key(listing).Min(min).Max("+inf").Byscore().Limit(0, int64(limit)).Withscores().Build()).AsZScores()
	if err != nil {
		return WorkerPage{}, fmt.Errorf("a2redis: listing workers: %w", err)
	}
	var next string
	if len(entries) == limit {
		// Finish the last expiry time on this page, so the next starts after it.
		last := int64(entries[len(entries)-1].Score)
		rest, err := s.do(ctx, c.B().Zrangebyscore().Key(listing).Min(itoa(last)).Max(itoa(last)).Withscores().Build()).AsZScores()
		if err != nil {
			return WorkerPage{}, fmt.Errorf("a2redis: listing workers: %w", err)
		}
		seen := make(map[string]bool, len(entries))
		for _, e := range entries {
			seen[e.Member] = true
		}
		for _, e := range rest {
			if !seen[e.Member] {
				entries = append(entries, e)
			}
		}
		next = "w" + itoa(last)
	}
	page := WorkerPage{Next: next, Workers: make([]WorkerInfo, 0, len(entries))}
	if len(entries) == 0 {
		return page, nil
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = keys.Worker(s.cfg.Prefix, e.Member)
	}
	// Every record shares the registry's slot: MGET works on a cluster.
	values, err := s.do(ctx, c.B().Mget().Key(names...).Build()).ToArray()
	if err != nil {
		return WorkerPage{}, fmt.Errorf("a2redis: reading worker records: %w", err)
	}
	for i, v := range values {
		raw, err := v.ToString()
		if rueidis.IsRedisNil(err) {
			continue // deregistered or expired meanwhile
		}
		if err != nil {
			return WorkerPage{}, fmt.Errorf("a2redis: reading worker %q: %w", entries[i].Member, err)
		}
		info, err := decodeWorker(raw)
		if err != nil {
			return WorkerPage{}, fmt.Errorf("a2redis: worker %q: %w", entries[i].Member, err)
		}
		if info.ExpiresAt.UnixMilli() <= now {
			continue
		}
		page.Workers = append(page.Workers, info)
	}
	return page, nil
}

func decodeWorker(raw string) (WorkerInfo, error) {
	var rec workerRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return WorkerInfo{}, fmt.Errorf("undecodable record: %w", err)
	}
	info := rec.WorkerInfo
	if rec.StartedAt != 0 {
		info.StartedAt = time.UnixMilli(rec.StartedAt)
	}
	info.HeartbeatAt = time.UnixMilli(rec.HeartbeatAt)
	info.ExpiresAt = time.UnixMilli(rec.ExpiresAt)
	return info, nil
}
