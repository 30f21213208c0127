// Package redisstore is the a2redis store: a durable per-session event log
// with consumer cursors on Redis 7+, Valkey, Upstash or Redis Cluster (and
// embedded miniredis). Every write is one atomic Lua script; every read is a
// plain command or a read-only script.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// KeyLocking says whether scripts carry Upstash's allow-key-locking flag.
type KeyLocking int

// The key-locking modes.
const (
	// KeyLockingAuto asks the server once (the default): Redis and Valkey
	// reject the flag, Upstash accepts it.
	KeyLockingAuto KeyLocking = iota
	// KeyLockingOn always sends the flag.
	KeyLockingOn
	// KeyLockingOff never sends the flag.
	KeyLockingOff
)

// Defaults of Config.
const (
	DefaultPrefix      = "a2"
	DefaultPublishWait = 100 * time.Millisecond
	DefaultMaxBatch    = a2redis.MaxBatch
	DefaultClaimLimit  = 256
	// ReadPageSize is how many entries one XRANGE of a read fetches.
	ReadPageSize = 256
	// ReclaimPageSize is how many old entries one reclaim step deletes.
	ReclaimPageSize = 256
	// IndexPageSize is how many entries one type-index step scans.
	IndexPageSize = 1000
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Prefix is the key prefix of every key and channel. It may not
	// contain braces. Default "a2".
	Prefix string
	// Clock is the store's clock: every stored time, claim expiry and
	// presence expiry comes from it, never from Redis. Default time.Now.
	Clock func() time.Time
	// IDs generates event ids for events appended without one and for
	// clear markers. Default: for the events of a batch, 96 random bits
	// shared by the batch (24 hex digits) followed by the event's position
	// (8 hex digits), recorded as one id block per batch; for a clear
	// marker, RandomID. Either way 32 lower-case hex digits.
	IDs func() string
	// KeyLocking chooses whether scripts carry Upstash's
	// allow-key-locking flag. Default KeyLockingAuto.
	KeyLocking KeyLocking
	// PublishWait bounds how long a write waits for its wake-up PUBLISH
	// after the script committed (a caller whose deadline leaves less does
	// not wait: the publish goes on in the background). A failed or slow
	// publish never fails the write. Default 100ms; negative disables
	// wake-ups.
	PublishWait time.Duration
	// ShardedPubSub publishes wake-ups with SPUBLISH (Redis 7 sharded
	// pub/sub) instead of PUBLISH. On a cluster a sharded message goes only
	// to the session's shard instead of every node; subscribers must then
	// use SSUBSCRIBE. Default false (plain PUBLISH works everywhere,
	// miniredis included).
	ShardedPubSub bool
	// MaxBatch is the most events one Append or CompleteAttempt may carry,
	// and the most heads one claim takes or one renewal, completion or
	// release names. Default and most a2redis.MaxBatch (1000).
	MaxBatch int
	// ClaimLimit is the default ClaimRequest.Limit. Default 256 (or
	// MaxBatch when that is less); at most MaxBatch.
	ClaimLimit int
	// NoCoalescing sends every plain Append (no causes, no lane targets, no
	// served log consumer) in a script call of its own. By default, plain
	// appends to one session that arrive while an earlier one is in flight
	// queue up and go together in the next call, each batch still screened
	// and written on its own: the same results, fewer script calls and
	// wake-ups on a busy session.
	NoCoalescing bool
	// NoCompaction turns off the rebuild of a small settled session. By
	// default, when a write leaves a session without work and its log
	// holds at most CompactLogEntries entries (and CompactBytes), one more
	// script call rebuilds the log and its head chunks to their size: a
	// session with one handled event costs ~1.3 KB instead of ~5.7 KB, one
	// with 100 ~12 KB instead of ~27 KB (Redis keeps a 4 KB node for a
	// stream's newest entries; a head chunk stays a hashtable while its
	// heads are live). Never on key-locking servers (they refuse DUMP in
	// scripts) nor on miniredis (it cannot DUMP a stream).
	NoCompaction bool
	// Consumers declares consumers this process knows of. New registers
	// each in the prefix's consumer registry (Store.AddConsumers), which
	// every store of the prefix serves whatever its own Config: every
	// Append, CompleteAttempt, Redrive, claim and ClaimNext that does not
	// name its own Consumers serves the registry's (so an Append starts
	// every registered typed log cursor its events concern, even from a
	// store that declares none), and a claim, renewal or redrive naming a
	// consumer the registry lacks is an ErrInvalidArgument. A declared
	// consumer registered with another declaration fails New with
	// a2redis.ErrConsumerMismatch. Default none: the store serves the
	// registry as it finds it (every consumer while it is empty).
	Consumers []a2redis.Consumer
	// ConsumerRefresh bounds how old the store's copy of the consumer
	// registry may be: a call that finds its copy older reads the registry
	// again first (one GET, at most once per interval, on the calling
	// path), so a change made by any store reaches every store within it.
	// Default DefaultConsumerRefresh (1s); negative: the registry is read
	// at New only (and by ReadConsumers, AddConsumers, RemoveConsumers).
	ConsumerRefresh time.Duration
	// ReadyShards is how many shards the prefix's ready index has (each
	// its own hash tag, so they spread over a cluster's nodes). Every store
	// on a prefix must use the same number: the first store records it and
	// New refuses another. Default keys.DefaultReadyShards (8).
	ReadyShards int
	// ReadyWait bounds how long a write waits for its ready-index update
	// after the script committed, and the caller's deadline bounds it
	// further; an update that fails or times out never fails the write: it
	// is kept and sent with the store's next update (RepairReady restores
	// what a process took with it). Default 1s.
	ReadyWait time.Duration
	// Retries bounds the store's own retries of commands the server
	// refused for now (a2redis.ErrUnavailable) or whose connection failed.
	// Default: 5 tries with jittered backoff from 10ms to 500ms, within
	// the caller's context; Attempts 1 turns retrying off. See RetryPolicy.
	Retries RetryPolicy
	// Durability makes each write wait for replicas (WAIT) and/or the AOF
	// (WAITAOF) and report a write that is not acknowledged in time as
	// a2redis.ErrNotReplicated. Default: no waiting. See Durability.
	Durability Durability
	// Observer, when set, is told about every append, claim and settling
	// call (spans and metrics: package a2otel), and supplies the trace
	// context appends store with their events. Nil: none of that work.
	Observer Observer
}

// Store is an a2redis store on one key prefix. It is safe for concurrent
// use.
type Store struct {
	client rueidis.Client
	// scripts runs scripts: EVALSHA, loaded by SCRIPT LOAD (scriptload.go).
	scripts rueidis.Client
	cfg     Config
	schema  string
	mu      sync.Mutex
	locking int // 0 unknown, 1 yes, 2 no
	// blockIDs: ids are generated per batch (nonce + position), not by
	// cfg.IDs.
	blockIDs bool

	coalesce coalescer
	skips    skipCache
	late     lateReady
	lines    readyLines
	bigLogs  bigLogs
	// maxBulk is the largest value one command argument may carry: the
	// least proto-max-bulk-len of the nodes when New could read it and it
	// is below a2redis.MaxPayloadBytes, else 0 (the constant bounds it).
	maxBulk int
	view    readyView
	reg     registry
}

// New returns a store on client. It claims the prefix's layout (a prefix
// holding another layout fails with ErrLayoutMismatch) and, with
// KeyLockingAuto, asks the server whether it accepts the key-locking flag;
// a transport error during that probe is not fatal: the next operation asks
// again.
func New(ctx context.Context, client rueidis.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, check.Invalid("client", "is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := keys.ValidatePrefix(cfg.Prefix); err != nil {
		return nil, check.Invalid("Config.Prefix", "%v", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	blockIDs := cfg.IDs == nil
	if blockIDs {
		cfg.IDs = RandomID
	}
	if cfg.PublishWait == 0 {
		cfg.PublishWait = DefaultPublishWait
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxBatch < 0 || cfg.MaxBatch > a2redis.MaxBatch {
		return nil, check.Invalid("Config.MaxBatch", "must be in [1, a2redis.MaxBatch (%d)] (got %d)", a2redis.MaxBatch, cfg.MaxBatch)
	}
	if cfg.ClaimLimit == 0 {
		cfg.ClaimLimit = min(DefaultClaimLimit, cfg.MaxBatch)
	}
	if cfg.ClaimLimit < 0 || cfg.ClaimLimit > cfg.MaxBatch {
		return nil, check.Invalid("Config.ClaimLimit", "must be in [1, Config.MaxBatch (%d)] (got %d)", cfg.MaxBatch, cfg.ClaimLimit)
	}
	if cfg.ReadyShards == 0 {
		cfg.ReadyShards = keys.DefaultReadyShards
	}
	if cfg.ReadyShards < 0 || cfg.ReadyShards > 1024 {
		return nil, check.Invalid("Config.ReadyShards", "must be in [1, 1024] (got %d)", cfg.ReadyShards)
	}
	if cfg.ReadyWait == 0 {
		cfg.ReadyWait = DefaultReadyWait
	}
	if cfg.ReadyWait < 0 {
		return nil, check.Invalid("Config.ReadyWait", "is negative")
	}
	if _, err := servedArg(cfg.Consumers); err != nil {
		return nil, fmt.Errorf("Config.Consumers: %w", err)
	}
	if err := checkRetries(&cfg); err != nil {
		return nil, err
	}
	s := &Store{client: client, cfg: cfg, schema: keys.Schema(cfg.Prefix), blockIDs: blockIDs}
	s.scripts = s.loader(client)
	s.lines.rideFor = rideFor
	s.lines.flush = func(shard int) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ReadyWait)
		defer cancel()
		s.sendRiders(ctx, shard)
	}
	switch cfg.KeyLocking {
	case KeyLockingOn:
		s.locking = 1
	case KeyLockingOff:
		s.locking = 2
	case KeyLockingAuto:
	default:
		return nil, check.Invalid("Config.KeyLocking", "unknown mode %d", cfg.KeyLocking)
	}
	if err := s.claimLayout(ctx); err != nil {
		return nil, err
	}
	if err := s.claimReadyShards(ctx); err != nil {
		return nil, err
	}
	if cfg.ConsumerRefresh == 0 {
		s.cfg.ConsumerRefresh = DefaultConsumerRefresh
	}
	if len(cfg.Consumers) > 0 {
		if err := s.AddConsumers(ctx, cfg.Consumers...); err != nil {
			return nil, fmt.Errorf("Config.Consumers: %w", err)
		}
	} else if _, err := s.readRegistry(ctx); err != nil {
		return nil, err
	}
	if err := s.checkDurability(ctx); err != nil {
		return nil, err
	}
	s.readBulkLimit(ctx)
	// A transport error leaves the answer unknown; the next script asks.
	_, _ = s.keyLocking(ctx)
	return s, nil
}

// RandomID returns 128 random bits as 32 hex digits.
func RandomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// MaxBatch returns the most events one batch, and heads one claim,
// renewal, completion or release, may hold (Config.MaxBatch).
func (s *Store) MaxBatch() int { return s.cfg.MaxBatch }

// Client returns the store's Redis client.
func (s *Store) Client() rueidis.Client { return s.client }

// Now returns the time by the store's clock (Config.Clock), which every
// stored time, lease and hold is measured with.
func (s *Store) Now() time.Time { return s.cfg.Clock() }

// KeyLockingEnabled reports whether scripts carry the key-locking flag, and
// whether that is known yet.
func (s *Store) KeyLockingEnabled() (enabled, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locking == 1, s.locking != 0
}

func (s *Store) now() int64 { return s.cfg.Clock().UnixMilli() }

func (s *Store) keys(session string) keys.Session { return keys.For(s.cfg.Prefix, session) }

func (s *Store) claimLayout(ctx context.Context) error {
	c := s.client
	if err := s.do(ctx, c.B().Set().Key(s.schema).Value(keys.Layout).Nx().Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("a2redis: claiming layout of prefix %q: %w", s.cfg.Prefix, err)
	}
	found, err := s.do(ctx, c.B().Get().Key(s.schema).Build()).ToString()
	if err != nil {
		return fmt.Errorf("a2redis: reading layout of prefix %q: %w", s.cfg.Prefix, err)
	}
	if found != keys.Layout {
		return &a2redis.LayoutError{Prefix: s.cfg.Prefix, Found: found, Want: keys.Layout}
	}
	return nil
}

// keyLocking returns whether to send the flag, probing the server when the
// answer is not known yet.
func (s *Store) keyLocking(ctx context.Context) (bool, error) {
	s.mu.Lock()
	state := s.locking
	s.mu.Unlock()
	if state != 0 {
		return state == 1, nil
	}
	c := s.client
	err := s.retrying(ctx, true, func(ctx context.Context) error {
		err := c.Do(ctx, c.B().Eval().Script(scripts.KeyLockingShebang+"\nreturn 1").Numkeys(1).Key(s.schema).Build()).Error()
		switch {
		case err == nil:
			state = 1
		case scripts.IsFlagRejection(err):
			state = 2
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("a2redis: probing key-locking support: %w", err)
	}
	s.mu.Lock()
	s.locking = state
	s.mu.Unlock()
	return state == 1, nil
}

// endsClaims names the scripts that end claims (see Store.endedClaims).
var endsClaims = map[string]bool{
	"complete": true, "complete_event": true, "complete_fast": true, "complete_many": true,
	"fail": true, "release": true, "cancel": true,
}

// run runs a script over a session: KEYS[1] is the session counter. It
// retries as Config.Retries allows (see repeatable). With Durability on, a
// write not acknowledged in time returns its reply together with a
// *a2redis.ReplicationError.
func (s *Store) run(ctx context.Context, name, session string, args []string) ([]rueidis.RedisMessage, error) {
	values, notReplicated, err := s.runTry(ctx, name, session, args)
	if err == nil && notReplicated != nil {
		err = notReplicated
	}
	return values, err
}

// runTry is run with the replication shortfall apart.
func (s *Store) runTry(ctx context.Context, name, session string, args []string) ([]rueidis.RedisMessage, *a2redis.ReplicationError, error) {
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return nil, nil, err
	}
	script := scripts.All()[name]
	script.Ran()
	var msg rueidis.RedisMessage
	var notReplicated *a2redis.ReplicationError
	err = s.retrying(ctx, script.ReadOnly || repeatable(name), func(ctx context.Context) (err error) {
		msg, notReplicated, err = s.execScript(ctx, script.Lua(locking), script.ReadOnly, session, args)
		return err
	})
	if err != nil {
		if _, reply := rueidis.IsRedisErr(err); !script.ReadOnly && !reply {
			// The write may have committed with its reply lost: its ready
			// mark with it. List the session again from its true state
			// (harmless when nothing was written) before returning, so
			// that a caller's next call finds the index right; RepairReady
			// covers a resync that fails too.
			s.resyncLost(ctx, session)
		}
		return nil, nil, fmt.Errorf("a2redis: %s script in session %q: %w", name, session, err)
	}
	if msg.IsInt64() {
		// A lone integer (append_one's common reply: cheaper for the
		// server than an array) is the reply's only value.
		return []rueidis.RedisMessage{msg}, notReplicated, nil
	}
	if !msg.IsArray() {
		return nil, nil, fmt.Errorf("%w: %s script replied %v", a2redis.ErrUnexpectedReply, name, msg)
	}
	values, _ := msg.ToArray()
	values, mark := popReadyMark(values)
	if mark != "" && !s.deferClaimMark(ctx, name, session, mark) {
		s.noteReady(ctx, session, mark, selfCompacting(name, args))
	}
	if endsClaims[name] {
		s.endedClaims(session)
	}
	if w := word(values, 0); w == "general" || w == "index" {
		// Handed on with nothing written: the next script's wait covers it.
		notReplicated = nil
	}
	return values, notReplicated, nil
}

// runIndexed runs a write that may first need a type index to reach further
// back: such a write replies { 'index', type, after } having written
// nothing, and runs again once index_type has extended the index. Only the
// last call's replication counts: its wait covers the index steps before.
func (s *Store) runIndexed(ctx context.Context, name, session string, args []string) ([]rueidis.RedisMessage, error) {
	for {
		reply, notReplicated, err := s.runTry(ctx, name, session, args)
		if err != nil {
			return nil, err
		}
		if word(reply, 0) != "index" {
			if notReplicated != nil {
				return reply, notReplicated
			}
			return reply, nil
		}
		typ, after := word(reply, 1), word(reply, 2)
		for {
			done, _, err := s.runTry(ctx, "index_type", session, []string{typ, after, itoa(IndexPageSize)})
			if err != nil {
				return nil, err
			}
			if word(done, 0) == "1" {
				break
			}
		}
	}
}

// publish sends a wake-up after a committed write.
func (s *Store) publish(ctx context.Context, session string, message []byte) {
	s.publishOn(ctx, s.keys(session).NotifyChannel(), message)
}

// publishFor is publish for a caller whose deadline ctx no longer carries.
func (s *Store) publishFor(ctx context.Context, deadline time.Time, session string, message []byte) {
	s.publishBy(ctx, deadline, s.keys(session).NotifyChannel(), message)
}

// publishOn publishes after a committed write, waiting at most PublishWait;
// its failure never fails the write. When the caller's deadline leaves
// less than PublishWait, the call does not wait for it: the publish goes
// on in the background, still bounded by PublishWait.
func (s *Store) publishOn(ctx context.Context, channel string, message []byte) {
	deadline, _ := ctx.Deadline()
	s.publishBy(ctx, deadline, channel, message)
}

// publishBy is publishOn for a caller whose deadline (zero for none) ctx
// may no longer carry.
func (s *Store) publishBy(ctx context.Context, deadline time.Time, channel string, message []byte) {
	if s.cfg.PublishWait < 0 {
		return
	}
	send := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.PublishWait)
		defer cancel()
		c := s.client
		if s.cfg.ShardedPubSub {
			_ = c.Do(ctx, c.B().Spublish().Channel(channel).Message(rueidis.BinaryString(message)).Build()).Error()
			return
		}
		_ = c.Do(ctx, c.B().Publish().Channel(channel).Message(rueidis.BinaryString(message)).Build()).Error()
	}
	if !deadline.IsZero() && time.Until(deadline) < s.cfg.PublishWait {
		go send(ctx)
		return
	}
	send(ctx)
}

// errorf wraps a sentinel with a message about a session.
func errorf(sentinel error, session, format string, a ...any) error {
	return fmt.Errorf("%w: %s (session %q)", sentinel, fmt.Sprintf(format, a...), session)
}

var checkSession = check.Session

// readBulkLimit reads the nodes' proto-max-bulk-len (CONFIG GET; a server
// that refuses CONFIG, or miniredis, leaves the constant in charge): a
// server configured below a2redis.MaxPayloadBytes would refuse a payload
// the store accepts, and drop the connection while the payload is still
// being sent, which a client cannot tell from a network failure.
func (s *Store) readBulkLimit(ctx context.Context) {
	for _, n := range s.client.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		reply, err := n.Do(cctx, n.B().ConfigGet().Parameter("proto-max-bulk-len").Build().Pin()).AsStrMap()
		cancel()
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(reply["proto-max-bulk-len"], 10, 64)
		if err != nil || v <= 0 || v >= a2redis.MaxPayloadBytes {
			continue
		}
		if s.maxBulk == 0 || int(v) < s.maxBulk {
			s.maxBulk = int(v)
		}
	}
}

// checkServerBulk refuses a value the server would refuse (see
// readBulkLimit).
func (s *Store) checkServerBulk(arg string, value []byte) error {
	if s.maxBulk > 0 && len(value) > s.maxBulk {
		return check.Invalid(arg, "is %d bytes, more than the server's proto-max-bulk-len (%d)", len(value), s.maxBulk)
	}
	return nil
}
