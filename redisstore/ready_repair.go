package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// resyncReady lists a session again from its true state, under a new
// version (ready_sync).
func (s *Store) resyncReady(ctx context.Context, session string) error {
	_, err := s.run(ctx, "ready_sync", session, []string{itoa(s.now())})
	return err
}

// resyncLost lists a session again after a write whose reply was lost:
// within ReadyWait and the caller's own deadline (a caller that gave up is
// not kept waiting; RepairReady covers what this misses).
func (s *Store) resyncLost(ctx context.Context, session string) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyWait)
	defer cancel()
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return
	}
	// One try, outside the retry wrapper: the connection just failed.
	lua := scripts.All()["ready_sync"].Lua(locking)
	msg, err := lua.Exec(ctx, s.scripts, []string{s.keys(session).Count(), s.keys(session).Sentinel()}, []string{itoa(s.now())}).ToMessage()
	if err != nil {
		return
	}
	values, _ := msg.ToArray()
	if _, mark := popReadyMark(values); mark != "" {
		s.noteReady(ctx, session, mark, false)
	}
}

// RepairStats reports what a RepairReady pass did.
type RepairStats struct {
	// Sessions is how many sessions' records were read.
	Sessions int
	// Sent is how many of their states were sent to the index.
	Sent int
	// DeadMended is how many sessions the dead index listed stale (its
	// dead letters gone, or the session dropped) and the pass mended.
	DeadMended int
	// Unreachable is how many nodes the pass could not read (a master
	// that died, before the cluster has promoted its replica); their
	// sessions wait for the next pass, and the pass returns an error
	// wrapping a2redis.ErrUnavailable. A shard that cannot be updated fails
	// the pass the same way, after the other shards are.
	Unreachable int
}

// sendFailures collects a repair pass's failed shard updates.
type sendFailures struct {
	n   int
	err error
}

// repairPage is how many keys one repair SCAN step asks for.
const repairPage = 1000

// RepairReady makes the ready index list every session whose own record
// says it has work: it scans the prefix's sessions (SCAN on every master,
// never KEYS) and sends each such session's recorded state with its
// recorded version; a shard applies only what it lacks, so a pass costs a
// read per session and writes nothing where the index is right. (A lost
// removal only leaves a session listed early, which the claim that visits
// it mends.) A write
// whose index update was lost (the process died or its connection broke
// between the script and the update) is listed again by the next pass: run
// it periodically (the worker runtime does, one store at a time per prefix)
// and a session with work stays unlisted at most one interval plus one
// pass. The dead index is mended in the same pass: a session's dead-letter
// state rides its listed record, so it is sent with it; and each session
// the dead index lists whose record holds no dead letters (or that has no
// record: dropped) is listed again from its true state or forgotten (see
// repairDead; a read per listed session).
func (s *Store) RepairReady(ctx context.Context) (RepairStats, error) {
	return s.repairReady(ctx, false)
}

// repairReady is RepairReady; with recount, each session whose record
// holds no dead-letter state has its dead letters counted too (see
// RecountDeadLetters).
func (s *Store) repairReady(ctx context.Context, recount bool) (RepairStats, error) {
	var st RepairStats
	pending := map[int][]readyUpdate{}
	pattern := keys.EscapeGlob(s.cfg.Prefix) + ":{*}:listed"
	nodes, unreachable, nodeErr := s.masters(ctx)
	var failed sendFailures
	for _, node := range nodes {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			// One node's call is bounded: rueidis retries a read on a
			// node that refuses connections for as long as it may.
			nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
			entry, err := node.Do(nctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(repairPage).Build().Pin()).AsScanEntry()
			cancel()
			if err != nil && ctx.Err() == nil {
				unreachable++
				nodeErr = cmp.Or(nodeErr, err)
				break
			}
			if err != nil {
				return st, fmt.Errorf("a2redis: repair scan: %w", err)
			}
			if err := s.repairKeys(ctx, entry.Elements, recount, &st, pending, &failed); err != nil {
				return st, err
			}
			if cursor = entry.Cursor; cursor == 0 {
				break
			}
		}
	}
	for shard, updates := range pending {
		s.repairSend(ctx, shard, updates, &st, &failed)
	}
	if err := ctx.Err(); err != nil {
		return st, err
	}
	st.DeadMended += s.repairDead(ctx, &failed)
	if err := ctx.Err(); err != nil {
		return st, err
	}
	st.Unreachable = unreachable
	switch {
	case unreachable > 0:
		return st, fmt.Errorf("%w: a2redis: repair could not read %d node(s), their sessions wait for the next pass: %w", a2redis.ErrUnavailable, unreachable, nodeErr)
	case failed.err != nil:
		return st, fmt.Errorf("%w: a2redis: repair could not update %d shard call(s), their sessions wait for the next pass: %w", a2redis.ErrUnavailable, failed.n, failed.err)
	}
	return st, nil
}

// repairSend sends a repair pass's updates of one shard; a shard that
// fails is recorded in failed, and the pass goes on with the others.
func (s *Store) repairSend(ctx context.Context, shard int, updates []readyUpdate, st *RepairStats, failed *sendFailures) {
	if err := s.applyReady(ctx, shard, updates); err != nil {
		failed.n++
		failed.err = cmp.Or(failed.err, err)
		return
	}
	st.Sent += len(updates)
}

// repairKeys reads the listed records among names and queues their states
// per shard in pending, sending a shard's queue once it fills a call.
func (s *Store) repairKeys(ctx context.Context, names []string, recount bool, st *RepairStats, pending map[int][]readyUpdate, failed *sendFailures) error {
	var sessions []string
	cmds := make(rueidis.Commands, 0, len(names))
	c := s.client
	for _, name := range names {
		session, ok := sessionOfListedKey(s.cfg.Prefix, name)
		if !ok {
			continue
		}
		sessions = append(sessions, session)
		cmds = append(cmds, c.B().Get().Key(name).Build())
		if recount {
			cmds = append(cmds, c.B().Zcount().Key(s.keys(session).Runnable()).Min("-inf").Max("(0").Build())
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	now := s.now()
	replies := s.doMulti(ctx, cmds...)
	step := 1
	if recount {
		step = 2
	}
	for i := range sessions {
		reply := replies[step*i]
		text, err := reply.ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("a2redis: repair read: %w", err)
		}
		st.Sessions++
		parts := strings.SplitN(text, ":", 4)
		if len(parts) < 2 {
			continue
		}
		version, at, dead := parts[0], parts[1], ""
		if len(parts) == 4 {
			dead = parts[3]
		}
		if recount && dead == "" {
			if n, err := replies[step*i+1].AsInt64(); err == nil && n > 0 {
				// Dead letters the record does not hold (made by an older
				// release): list the session again from its true state.
				if err := s.resyncDead(ctx, sessions[i]); err != nil {
					return err
				}
				st.DeadMended++
				continue
			}
		}
		if at == "" && dead == "" {
			// No work: a lost removal leaves an entry listed early, which
			// the claim that visits it mends (ready_sync); only work that
			// may be unlisted needs sending.
			continue
		}
		due := false
		if at != "" {
			ms, err := strconv.ParseInt(at, 10, 64)
			due = err == nil && ms <= now
		}
		shard := keys.ReadyShard(sessions[i], s.cfg.ReadyShards)
		pending[shard] = append(pending[shard], readyUpdate{session: sessions[i], version: version, at: at, due: due, dead: dead})
		if len(pending[shard]) >= readyBatch {
			s.repairSend(ctx, shard, pending[shard], st, failed)
			pending[shard] = nil
		}
	}
	return nil
}

func sessionOfListedKey(prefix, key string) (string, bool) {
	head := prefix + ":{"
	if !strings.HasPrefix(key, head) || !strings.HasSuffix(key, "}:listed") {
		return "", false
	}
	session, ok := keys.ParseTag(key[len(head) : len(key)-len("}:listed")])
	if !ok || keys.For(prefix, session).Listed() != key {
		return "", false
	}
	return session, true
}

// masters returns the clients whose keys together are every key once: the
// one server, or each master of a cluster; and how many nodes of a cluster
// did not say their role in time (Retries.Unavailable each).
func (s *Store) masters(ctx context.Context) ([]rueidis.Client, int, error) {
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	var out []rueidis.Client
	failed := 0
	var first error
	for _, addr := range addrs {
		node := nodes[addr]
		if s.client.Mode() == rueidis.ClientModeCluster {
			nctx, cancel := context.WithTimeout(ctx, s.cfg.Retries.Unavailable)
			role, err := node.Do(nctx, node.B().Role().Build().Pin()).ToArray()
			cancel()
			if err != nil || len(role) == 0 {
				if ctx.Err() == nil {
					failed++
					first = cmp.Or(first, fmt.Errorf("ROLE on %s: %w", addr, cmp.Or(err, errors.New("empty reply"))))
				}
				continue
			}
			if r, _ := role[0].ToString(); r != "master" {
				continue
			}
		}
		out = append(out, node)
	}
	return out, failed, first
}

// TryRepairReady runs RepairReady unless another store on the prefix
// repaired within `every`: the stores of a deployment share one repair per
// interval (a lock key with that expiry). It reports whether this store ran
// the pass.
func (s *Store) TryRepairReady(ctx context.Context, every time.Duration) (bool, RepairStats, error) {
	if every <= 0 {
		return false, RepairStats{}, check.Invalid("every", "must be positive (got %v)", every)
	}
	c := s.client
	err := s.do(ctx, c.B().Set().Key(keys.RepairLock(s.cfg.Prefix)).Value(strconv.FormatInt(s.now(), 10)).Nx().Px(every).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, RepairStats{}, nil
	}
	if err != nil {
		return false, RepairStats{}, fmt.Errorf("a2redis: taking the repair lock: %w", err)
	}
	st, err := s.RepairReady(ctx)
	return true, st, err
}
