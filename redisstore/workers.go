package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/keys"
)

// MaxWorkerHeads is the most held heads a worker record lists
// (WorkerInfo.Heads); WorkerInfo.HeadsTotal counts them all.
const MaxWorkerHeads = workerreg.MaxHeads

// workerPrune is how many expired members one registry write prunes from
// the listing at most.
const workerPrune = 100

// GoneWorkerKept is how long the registry's listing keeps a worker whose
// record expired without a deregistration (a process that died or stopped
// heartbeating): GoneWorkers reports it for that long, so the views can
// tell the claims it still holds (until their lease ends) from a live
// worker's. Workers never lists it.
const GoneWorkerKept = time.Hour

// WorkerHead is one head a worker holds.
type WorkerHead = workerreg.Head

// WorkerInfo is what a running worker process tells the prefix about
// itself, as the worker registry holds it (Workers). The worker runtime
// writes it; the writes are not part of the store's API.
type WorkerInfo = workerreg.Info

func init() {
	workerreg.Of = func(store any) workerreg.Writer { return workerWriter{store.(*Store)} }
}

// workerWriter is a store's worker-registry writes (workerreg.Writer).
type workerWriter struct{ s *Store }

// Register implements workerreg.Writer.
func (w workerWriter) Register(ctx context.Context, info WorkerInfo, ttl time.Duration) error {
	return w.s.registerWorker(ctx, info, ttl)
}

// Deregister implements workerreg.Writer.
func (w workerWriter) Deregister(ctx context.Context, id string) error {
	return w.s.deregisterWorker(ctx, id)
}

// workerRecord is WorkerInfo as stored: times in epoch ms.
type workerRecord struct {
	WorkerInfo
	StartedAt   int64 `json:"started_at"`
	HeartbeatAt int64 `json:"heartbeat_at"`
	ExpiresAt   int64 `json:"expires_at"`
}

// registerWorker is workerreg.Writer.Register: it writes (or refreshes) a
// worker's record in the prefix's worker registry for ttl.
func (s *Store) registerWorker(ctx context.Context, info WorkerInfo, ttl time.Duration) error {
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

// deregisterWorker is workerreg.Writer.Deregister: it removes a worker's
// record from the registry at once.
func (s *Store) deregisterWorker(ctx context.Context, id string) error {
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
	args := []string{id, itoa(now), itoa(ttl), record, itoa(workerPrune), itoa(now - GoneWorkerKept.Milliseconds())}
	// Repeatable: the same call again writes the same record and expiry.
	return s.retrying(ctx, true, func(ctx context.Context) error {
		return lua.Exec(ctx, s.scripts, k, args).Error()
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

// goneWorkersPage is how many ids one ZMSCORE of GoneWorkers names.
const goneWorkersPage = 1000

// GoneWorkers reports which of ids name registered workers whose record
// expired without a deregistration within GoneWorkerKept — their heartbeat
// stopped: the process died, hung or lost Redis — with when it expired, by
// the store's clock. A live worker, one that deregistered (a clean stop),
// and a holder that never registered (a claim made through the store
// directly) are not in the result. One read of the registry per 1,000 ids.
func (s *Store) GoneWorkers(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	now := s.now()
	c, listing := s.client, keys.Workers(s.cfg.Prefix)
	for from := 0; from < len(ids); from += goneWorkersPage {
		page := ids[from:min(from+goneWorkersPage, len(ids))]
		scores, err := s.do(ctx, c.B().Zmscore().Key(listing).Member(page...).Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("a2redis: reading the worker registry: %w", err)
		}
		for i, v := range scores {
			at, err := v.AsFloat64()
			if rueidis.IsRedisNil(err) {
				continue // not listed
			}
			if err != nil {
				return nil, fmt.Errorf("a2redis: reading the worker registry: %w", err)
			}
			if ms := int64(at); ms <= now {
				out[page[i]] = time.UnixMilli(ms)
			}
		}
	}
	return out, nil
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
