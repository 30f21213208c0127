package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
)

// Defaults of RetryPolicy and Durability.
const (
	DefaultRetryAttempts     = 5
	DefaultRetryMinBackoff   = 10 * time.Millisecond
	DefaultRetryMaxBackoff   = 500 * time.Millisecond
	DefaultRetryUnavailable  = 10 * time.Second
	DefaultDurabilityTimeout = time.Second
	// DefaultDurabilityAOFTimeout is the default wait of Durability.AOF
	// when an fsync may be a second away: with Replicas (the master cannot
	// tell how its replicas fsync; appendfsync everysec, Redis's default,
	// fsyncs about once a second, and a replica reports its fsynced offset
	// about once a second, so a write with a replica waits up to a second
	// even on appendfsync always, and 1 of 1,000 waited over 3s on a
	// machine at load 13) or with the master not on appendfsync always.
	DefaultDurabilityAOFTimeout = 5 * time.Second
)

// RetryPolicy bounds the store's own retries of a failed command. The
// store retries a command the server refused without running it
// (a2redis.ErrUnavailable, or a connection that could not be opened) for
// every operation, and a command whose outcome is unknown (the connection
// failed, or AttemptTimeout passed, after it was sent) only for the
// operations that are safe to repeat: every one except ClaimAvailable and
// Redrive (see the README, "Retries and failures"). Every retry sends the
// same arguments, event ids included, so a lost reply becomes a replay.
// Retries stop when the caller's context ends or its deadline is nearer
// than the next backoff.
type RetryPolicy struct {
	// Attempts is the most tries of one command, the first included,
	// except that refusals go on for Unavailable. Default
	// DefaultRetryAttempts (5); 1 turns retrying off, refusals included.
	Attempts int
	// Unavailable is how long the store keeps retrying a command the server
	// refuses (a2redis.ErrUnavailable), counted from the first try, before
	// it reports the refusal: long enough for a slot to migrate or a replica
	// to take over. Default DefaultRetryUnavailable (10s). The caller's
	// context still bounds it.
	Unavailable time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry: before the
	// n-th retry a random time in [0, min(MaxBackoff, MinBackoff·2^(n-1))]
	// ("full jitter"). Defaults DefaultRetryMinBackoff (10ms) and
	// DefaultRetryMaxBackoff (500ms).
	MinBackoff, MaxBackoff time.Duration
	// AttemptTimeout, when positive, bounds each try: a try without a reply
	// by then has an unknown outcome (it may still commit) and is retried
	// like a failed connection, within the caller's context. Default 0: a
	// try lasts as long as the caller's context.
	AttemptTimeout time.Duration
}

// Durability makes every write script wait until the write is on replicas
// (WAIT) and/or in the append-only file (WAITAOF, Redis 7.2+) before the
// store reports it. A write that is not acknowledged in time fails with a
// *a2redis.ReplicationError (a2redis.ErrNotReplicated): the master applied
// it and does not roll it back, but a failover may lose it. Replays are
// covered too: the wait follows a no-op rewrite of the session's counter,
// so it waits for every write the master applied before, an earlier try's
// included. The zero value waits for nothing (asynchronous replication:
// a failover may lose acknowledged writes).
type Durability struct {
	// Replicas is how many replicas must acknowledge each write. Default 0.
	Replicas int
	// AOF also waits until the master has fsynced the write to its
	// append-only file (and each of the Replicas to theirs): WAITAOF 1
	// Replicas. Needs Redis 7.2+ with appendonly yes; New fails with
	// a2redis.ErrInvalidArgument on a server without WAITAOF.
	AOF bool
	// Timeout bounds each wait (and is shortened to fit the caller's
	// deadline). Default, chosen by New from the configuration and the
	// master's appendfsync: DefaultDurabilityTimeout (1s) for WAIT alone,
	// and for AOF without Replicas on a master with appendfsync always;
	// DefaultDurabilityAOFTimeout (5s) for AOF otherwise (a 1s wait
	// reported a third of healthy writes not replicated with AOF and a
	// replica on appendfsync everysec). Store.Durability reports the
	// value chosen.
	Timeout time.Duration
}

func (d Durability) enabled() bool { return d.Replicas > 0 || d.AOF }

// Durability returns the store's Config.Durability, with the Timeout New
// chose when it was left zero.
func (s *Store) Durability() Durability { return s.cfg.Durability }

// checkRetries validates and defaults cfg's retry and durability settings.
func checkRetries(cfg *Config) error {
	r := &cfg.Retries
	if r.Attempts < 0 {
		return check.Invalid("Config.Retries.Attempts", "is negative (%d)", r.Attempts)
	}
	if r.MinBackoff < 0 || r.MaxBackoff < 0 || r.AttemptTimeout < 0 || r.Unavailable < 0 {
		return check.Invalid("Config.Retries", "has a negative duration")
	}
	if r.Attempts == 0 {
		r.Attempts = DefaultRetryAttempts
	}
	if r.Unavailable == 0 {
		r.Unavailable = DefaultRetryUnavailable
	}
	if r.MinBackoff == 0 {
		r.MinBackoff = DefaultRetryMinBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = DefaultRetryMaxBackoff
	}
	r.MaxBackoff = max(r.MaxBackoff, r.MinBackoff)
	d := &cfg.Durability
	if d.Replicas < 0 {
		return check.Invalid("Config.Durability.Replicas", "is negative (%d)", d.Replicas)
	}
	if d.Timeout < 0 {
		return check.Invalid("Config.Durability.Timeout", "is negative (%v)", d.Timeout)
	}
	// A zero Timeout is chosen by New (defaultWait), which asks the server.
	return nil
}

// defaultWait is Durability's default Timeout for a master whose
// appendfsync is fsync ("" when New could not read it).
func defaultWait(d Durability, fsync string) time.Duration {
	if d.AOF && (d.Replicas > 0 || fsync != "always") {
		return DefaultDurabilityAOFTimeout
	}
	return DefaultDurabilityTimeout
}

// failure is how a failed try ended, for the retry decision.
type failure int

const (
	// final: an answer (a reply, a contract refusal, the caller's context
	// or a closed client); never retried.
	final failure = iota
	// refused: the server refused the command without running it, or it
	// was never sent; retried for every operation.
	refused
	// unknown: the command may have run; retried only when repeating it is
	// safe.
	unknown
)

// The server replies meaning "not now" (a2redis.ErrUnavailable): each is
// sent before the command runs. The "non local key" error is a script's
// that reached a key its node does not hold; the store's scripts declare
// their slot's sentinel (keys.Session.Sentinel), so while a slot migrates
// Redis refuses them with TRYAGAIN before they run and this one would come
// only from the cluster changing under a script that writes nothing first.
var unavailablePrefixes = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY ", "ASK ", "MOVED ", "READONLY", "NOREPLICAS"}

// classify tells how err (of a try run under tryCtx, within the caller's
// ctx) ended, and returns it typed: a refusal by the server wraps
// a2redis.ErrUnavailable, a try that AttemptTimeout cut says so.
func classify(ctx, tryCtx context.Context, err error) (failure, error) {
	if err == nil || rueidis.IsRedisNil(err) {
		return final, err
	}
	var reply *rueidis.RedisError
	if errors.As(err, &reply) {
		if unavailableReply(reply.Error()) {
			return refused, fmt.Errorf("%w: %w", a2redis.ErrUnavailable, err)
		}
		return final, err
	}
	switch {
	case ctx.Err() != nil:
		return final, callerDeadline(ctx, err)
	case errors.Is(err, rueidis.ErrClosing):
		return final, err
	case tryCtx != ctx && tryCtx.Err() != nil:
		return unknown, fmt.Errorf("a2redis: no reply within Config.Retries.AttemptTimeout, the command may still run: %w", err)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return refused, fmt.Errorf("%w: %w", a2redis.ErrUnavailable, err)
	}
	return unknown, err
}

func unavailableReply(msg string) bool {
	msg = strings.TrimPrefix(msg, "ERR ")
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(msg, p) || msg == strings.TrimSpace(p) {
			return true
		}
	}
	return strings.Contains(msg, "non local key")
}

// refusalsOnceKey marks a context whose calls report a refusal after
// Attempts tries rather than retry it for Unavailable: ClaimNext moves on to
// another session instead of waiting for one whose slot is migrating.
type refusalsOnceKey struct{}

// refusalsOnce returns ctx marked with refusalsOnceKey.
func refusalsOnce(ctx context.Context) context.Context {
	return context.WithValue(ctx, refusalsOnceKey{}, true)
}

// retrying runs try until it succeeds, fails for good, or the policy gives
// up; repeatable says whether a try whose outcome is unknown may be run
// again. It returns try's last error, typed by classify.
func (s *Store) retrying(ctx context.Context, repeatable bool, try func(ctx context.Context) error) error {
	p := s.cfg.Retries
	if ctx.Value(refusalsOnceKey{}) != nil {
		p.Unavailable = 0
	}
	start := time.Now()
	for n := 1; ; n++ {
		tryCtx, cancel := ctx, context.CancelFunc(func() {})
		if p.AttemptTimeout > 0 {
			tryCtx, cancel = context.WithTimeout(ctx, p.AttemptTimeout)
		}
		err := try(tryCtx)
		cancel()
		if err == nil {
			return nil
		}
		kind, err := classify(ctx, tryCtx, err)
		switch {
		case kind == final, kind == unknown && !repeatable, p.Attempts <= 1:
			return err
		case kind == unknown && n >= p.Attempts:
			return err
		case kind == refused && n >= p.Attempts && time.Since(start) >= p.Unavailable:
			return err
		}
		wait := rand.N(min(p.MaxBackoff, p.MinBackoff<<min(n-1, 30)) + 1)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return callerDeadline(ctx, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return callerDeadline(ctx, err)
		case <-t.C:
		}
	}
}

// callerDeadline is the error of tries the caller's context ended (or
// whose deadline leaves no time for another): it matches the context's
// error (context.DeadlineExceeded when it has not quite passed) and wraps
// the last try's.
func callerDeadline(ctx context.Context, err error) error {
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (last try: %w)", cause, err)
}

// repeatable reports whether running a script again after a try whose
// outcome is unknown is safe: every script but the claims (a second claim
// would bump the attempt again), redrive (a second retry or skip would
// find no dead letter and report Redriven false) and cancel (a second one
// would find the head gone and report CancelNotFound). The others replay
// what an earlier try committed or write the same thing again.
func repeatable(name string) bool {
	switch name {
	case "claim", "claim_fast", "redrive", "cancel":
		return false
	}
	return true
}

// do sends a read (or an idempotent write) with the store's retries. The
// command is pinned, so rueidis does not recycle it between tries.
func (s *Store) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cmd = cmd.Pin()
	var res rueidis.RedisResult
	err := s.retrying(ctx, true, func(ctx context.Context) error {
		res = s.client.Do(ctx, cmd)
		return res.Error()
	})
	if err != nil && !rueidis.IsRedisNil(err) {
		return rueidis.NewErrorResult(err)
	}
	return res
}

// doMulti is do for reads sent together; a failed one retries them all.
func (s *Store) doMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	for i := range cmds {
		cmds[i] = cmds[i].Pin()
	}
	var res []rueidis.RedisResult
	err := s.retrying(ctx, true, func(ctx context.Context) error {
		res = s.client.DoMulti(ctx, cmds...)
		for _, r := range res {
			if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		for i := range res {
			res[i] = rueidis.NewErrorResult(err)
		}
	}
	return res
}

// execScript runs one try of a script; with Durability on and a script
// that writes, the script, a no-op rewrite of the session's counter and
// the wait go out together on one connection, and a shortfall is returned
// as the second error.
func (s *Store) execScript(ctx context.Context, lua *rueidis.Lua, readOnly bool, session string, args []string) (rueidis.RedisMessage, *a2redis.ReplicationError, error) {
	k := s.keys(session)
	if readOnly || !s.cfg.Durability.enabled() {
		msg, err := lua.Exec(ctx, s.scripts, []string{k.Count(), k.Sentinel()}, args).ToMessage()
		return msg, nil, err
	}
	w := &waitingClient{Client: s.client, s: s, count: k.Count(), clear: k.Clear()}
	msg, err := lua.Exec(ctx, s.loader(w), []string{k.Count(), k.Sentinel()}, args).ToMessage()
	if err != nil {
		return msg, nil, err
	}
	return msg, s.replicated(w.touch, w.wait), nil
}

// touchScript rewrites the session's counter (or, for a collapsed session,
// its clear marker) with its own value: a write that is replicated, so a
// WAIT after it covers every write the master applied before, including a
// replayed batch's first try.
const touchScript = `for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then redis.call('SET', k, v, 'KEEPTTL') return 1 end
end
return 0`

// redirectHops bounds how many MOVED or ASK replies a durable group follows
// before the redirect is returned as a refusal (retried by s.retrying).
const redirectHops = 2

// waitingClient sends each command Lua.Exec sends (EVALSHA, then EVAL on
// NOSCRIPT) together with the touch and the wait, in one pipeline on one
// dedicated connection, so the wait runs on the node that ran the script
// (WAIT counts the replicas of its own connection's writes).
//
// The group never goes through rueidis's cluster DoMulti: there a keyed
// command redirected by ASK in a group that also holds a blocking command
// (WAIT, WAITAOF) panics inside rueidis v1.0.79 and v1.0.80 (see docs/design-notes.md,
// "rueidis v1.0.79 panics on an ASK in a group with a blocking command"),
// and a redirect there could split the script from its wait. On a cluster
// the group goes to the node rueidis maps the session's slot to; a MOVED
// or ASK reply to the script is followed by sendFollowing.
type waitingClient struct {
	rueidis.Client
	s            *Store
	count, clear string
	touch, wait  rueidis.RedisResult
}

func (w *waitingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c, d := w.Client, w.s.cfg.Durability
	timeout := d.Timeout
	if dl, ok := ctx.Deadline(); ok {
		// Leave the wait time to answer before the deadline cuts it.
		timeout = max(min(timeout, time.Until(dl)*3/4), time.Millisecond)
	}
	// Pinned: a redirected group is sent again, and rueidis recycles a
	// command once it has a reply (a redirect is one).
	cmd = cmd.Pin()
	res := sendFollowing(ctx, c, func() rueidis.Commands {
		touch := c.B().Eval().Script(touchScript).Numkeys(2).Key(w.count, w.clear).Build()
		wait := c.B().Wait().Numreplicas(int64(d.Replicas)).Timeout(timeout.Milliseconds()).Build()
		if d.AOF {
			wait = c.B().Waitaof().Numlocal(1).Numreplicas(int64(d.Replicas)).Timeout(timeout.Milliseconds()).Build()
		}
		return rueidis.Commands{cmd, touch, wait}
	})
	w.touch, w.wait = res[1], res[2]
	return res[0]
}

// keylessSlot is the slot rueidis gives a command without keys
// (cmds.InitSlot); a command with keys has its key's slot, below it.
const keylessSlot = 1 << 14

// sendFollowing sends the group build returns with sendGroup and, on a
// cluster, follows a MOVED or ASK reply to its first command to the node
// the redirect names, with the group built again (after an ASK, ASKING
// goes before each of its commands with keys: ASKING covers one command),
// at most redirectHops times. A redirect not followed (the hops used up,
// or a node rueidis does not know yet) is returned as it is: a refusal,
// which s.retrying retries.
func sendFollowing(ctx context.Context, c rueidis.Client, build func() rueidis.Commands) []rueidis.RedisResult {
	res := sendGroup(ctx, c, build())
	if c.Mode() != rueidis.ClientModeCluster {
		return res
	}
	for hop := 0; hop < redirectHops; hop++ {
		addr, asking := redirected(res[0].Error())
		if addr == "" {
			break
		}
		node := c.Nodes()[addr]
		if node == nil {
			break
		}
		cmds := build()
		if !asking {
			res = sendGroup(ctx, node, cmds)
			continue
		}
		sent := make(rueidis.Commands, 0, 2*len(cmds))
		at := make([]int, len(cmds))
		for i := range cmds {
			if cmds[i].Slot() < keylessSlot {
				sent = append(sent, c.B().Asking().Build())
			}
			at[i] = len(sent)
			sent = append(sent, cmds[i])
		}
		all := sendGroup(ctx, node, sent)
		res = make([]rueidis.RedisResult, len(cmds))
		for i, j := range at {
			res[i] = all[j]
		}
	}
	return res
}

// sendGroup sends cmds in one pipeline on one dedicated connection of c
// (on a cluster, the connection to the node of their slot), and closes the
// connection when a reply did not come (a WAIT cut by the context would
// answer later).
func sendGroup(ctx context.Context, c rueidis.Client, cmds rueidis.Commands) []rueidis.RedisResult {
	var res []rueidis.RedisResult
	_ = c.Dedicated(func(d rueidis.DedicatedClient) error {
		res = d.DoMulti(ctx, cmds...)
		for _, r := range res {
			if r.NonRedisError() != nil {
				d.Close()
				break
			}
		}
		return nil
	})
	return res
}

// redirected returns the node a MOVED or ASK reply names, and whether it is
// an ASK; "" for any other outcome.
func redirected(err error) (addr string, asking bool) {
	reply, ok := rueidis.IsRedisErr(err)
	if !ok {
		return "", false
	}
	if addr, ok := reply.IsMoved(); ok {
		return addr, false
	}
	if addr, ok := reply.IsAsk(); ok {
		return addr, true
	}
	return "", false
}

// replicated checks the touch and the wait that followed a write.
func (s *Store) replicated(touch, wait rueidis.RedisResult) *a2redis.ReplicationError {
	d := s.cfg.Durability
	e := &a2redis.ReplicationError{Replicas: d.Replicas, Acked: -1, AOF: d.AOF}
	if err := touch.Error(); err != nil {
		e.Err = err
		return e
	}
	if d.AOF {
		acks, err := wait.AsIntSlice()
		if err == nil && len(acks) != 2 {
			err = fmt.Errorf("%w: WAITAOF replied %v", a2redis.ErrUnexpectedReply, acks)
		}
		if err != nil {
			e.Err = err
			return e
		}
		e.LocalAOF, e.Acked = acks[0] >= 1, int(acks[1])
		if e.LocalAOF && e.Acked >= d.Replicas {
			return nil
		}
		return e
	}
	acked, err := wait.AsInt64()
	if err != nil {
		e.Err = err
		return e
	}
	if e.Acked = int(acked); e.Acked >= d.Replicas {
		return nil
	}
	return e
}

// checkDurability asks the server (a master) whether it has the wait
// commands Durability needs (WAITAOF came with Redis 7.2), and chooses the
// default Timeout (defaultWait) from its appendfsync.
func (s *Store) checkDurability(ctx context.Context) error {
	d := &s.cfg.Durability
	if !d.enabled() {
		if d.Timeout == 0 {
			d.Timeout = DefaultDurabilityTimeout
		}
		return nil
	}
	c := s.client
	name, cmd := "WAIT", c.B().Wait().Numreplicas(0).Timeout(1).Build()
	field, needs := "Config.Durability.Replicas", "WAIT"
	if d.AOF {
		// WAITAOF 1 also fails on a server without appendonly yes.
		name, cmd = "WAITAOF", c.B().Waitaof().Numlocal(1).Numreplicas(0).Timeout(1).Build()
		field, needs = "Config.Durability.AOF", "WAITAOF (Redis 7.2+, with appendonly yes)"
	}
	// Alone, the keyless wait may go to any node of a cluster, and a
	// replica refuses it; after a read of the schema key it goes to that
	// key's master, as a write's wait goes with its script (and, like it,
	// not through rueidis's cluster DoMulti: see waitingClient).
	res := sendFollowing(ctx, c, func() rueidis.Commands {
		return rueidis.Commands{c.B().Exists().Key(s.schema).Build(), cmd.Pin(), c.B().ConfigGet().Parameter("appendfsync").Build()}
	})
	if err := res[0].Error(); err != nil {
		return fmt.Errorf("a2redis: asking the server for %s: %w", name, err)
	}
	err := res[1].Error()
	if _, ok := rueidis.IsRedisErr(err); ok {
		return check.Invalid(field, "needs %s, which the server refused: %v", needs, err)
	}
	if err != nil {
		return fmt.Errorf("a2redis: asking the server for %s: %w", name, err)
	}
	if d.Timeout == 0 {
		// A server that refuses CONFIG (a managed one) gets the longer
		// wait when in doubt.
		fsync := ""
		if m, err := res[2].AsStrMap(); err == nil {
			fsync = m["appendfsync"]
		} else if kv, err := res[2].AsStrSlice(); err == nil && len(kv) == 2 {
			fsync = kv[1]
		}
		d.Timeout = defaultWait(*d, fsync)
	}
	return nil
}

// notReplicatedOnly takes a replication shortfall out of *err when the
// script replied (the write is applied), and returns it.
func notReplicatedOnly(reply []rueidis.RedisMessage, err *error) error {
	var e *a2redis.ReplicationError
	if reply == nil || !errors.As(*err, &e) {
		return nil
	}
	*err = nil
	return e
}

// writeError is the error of a batch the store gave up on after sending
// it, or after trying to: a *a2redis.BatchError with the batch's ids,
// wrapping a2redis.ErrRejected when the server rejected it for good.
func writeError(session string, batch []prepared, err error) error {
	if err == nil || len(batch) == 0 {
		return err
	}
	err = rejected(err)
	ids := make([]string, len(batch))
	for i, e := range batch {
		ids[i] = e.id
	}
	return &a2redis.BatchError{Session: session, IDs: ids, Err: err}
}

// rejected wraps a2redis.ErrRejected around err when it holds a server's
// error reply that is not a refusal for now: sending the same request
// again would fail the same way.
func rejected(err error) error {
	var reply *rueidis.RedisError
	if !errors.As(err, &reply) || errors.Is(err, a2redis.ErrUnavailable) || errors.Is(err, a2redis.ErrRejected) {
		return err
	}
	return fmt.Errorf("%w: %w", a2redis.ErrRejected, err)
}

// handedOn reports a fast script's reply that hands the call to the
// general one, having written nothing, with only a replication shortfall
// as its error (the wait covered the touch alone): the general script
// runs, and its own wait tells.
func handedOn(reply []rueidis.RedisMessage, err error) bool {
	var e *a2redis.ReplicationError
	return word(reply, 0) == "general" && errors.As(err, &e)
}
