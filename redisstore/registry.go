package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/check"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// DefaultConsumerRefresh is Config.ConsumerRefresh's default.
const DefaultConsumerRefresh = time.Second

// MaxConsumers is the most consumers a prefix's registry holds.
const MaxConsumers = 256

// registryTries bounds the compare-and-set rounds of one registry change
// (each lost round means another process changed it in between).
const registryTries = 16

// consumerRecord is a consumer as the registry stores it.
type consumerRecord struct {
	Name        string     `json:"name"`
	Log         *logRecord `json:"log,omitempty"`
	PerSession  int        `json:"per_session,omitempty"`
	MaxFailures int        `json:"max_failures,omitempty"`
}

type logRecord struct {
	Lane     string   `json:"lane"`
	Types    []string `json:"types,omitempty"`
	Backfill bool     `json:"backfill,omitempty"`
}

type registryRecord struct {
	V         int64            `json:"v"`
	Consumers []consumerRecord `json:"consumers"`
	Paused    []string         `json:"paused,omitempty"`
}

func toRecord(c a2redis.Consumer) consumerRecord {
	r := consumerRecord{Name: c.Name, PerSession: c.PerSession, MaxFailures: c.MaxFailures}
	if c.Log != nil {
		r.Log = &logRecord{Lane: c.Log.Lane, Types: slices.Clone(c.Log.Types), Backfill: c.Log.Backfill}
	}
	return r
}

func fromRecord(r consumerRecord) a2redis.Consumer {
	c := a2redis.Consumer{Name: r.Name, PerSession: r.PerSession, MaxFailures: r.MaxFailures}
	if r.Log != nil {
		c.Log = &a2redis.LogSpec{Lane: r.Log.Lane, Types: slices.Clone(r.Log.Types), Backfill: r.Log.Backfill}
	}
	return c
}

// sameConsumer reports whether a and b declare the same consumer (the types
// of a log consumer compared as a set); settings (PerSession
// or MaxFailures) are not part of a consumer's identity.
func sameConsumer(a, b a2redis.Consumer) bool {
	if a.Name != b.Name || (a.Log == nil) != (b.Log == nil) {
		return false
	}
	if a.Log == nil {
		return true
	}
	if a.Log.Lane != b.Log.Lane || a.Log.Backfill != b.Log.Backfill || (a.Log.Types == nil) != (b.Log.Types == nil) {
		return false
	}
	x, y := slices.Clone(a.Log.Types), slices.Clone(b.Log.Types)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(slices.Compact(x), slices.Compact(y))
}

// sameSettings reports whether a and b are the same consumer with the same
// settings.
func sameSettings(a, b a2redis.Consumer) bool {
	return sameConsumer(a, b) && a.PerSession == b.PerSession && a.MaxFailures == b.MaxFailures
}

// withSettings is consumers with the settings (PerSession, MaxFailures) of the
// registered consumers of their names (an invalid one is left for the
// check that refuses it): the registry's settings win, so
// every claimer of the prefix keeps one limit.
func withSettings(consumers, registered []a2redis.Consumer) []a2redis.Consumer {
	var out []a2redis.Consumer
	for i, c := range consumers {
		j := slices.IndexFunc(registered, func(r a2redis.Consumer) bool { return r.Name == c.Name })
		if j < 0 || c.PerSession < 0 || c.MaxFailures < 0 || sameSettings(registered[j], c) || !sameConsumer(registered[j], c) {
			continue
		}
		if out == nil {
			out = slices.Clone(consumers)
		}
		out[i].PerSession, out[i].MaxFailures = registered[j].PerSession, registered[j].MaxFailures
	}
	if out == nil {
		return consumers
	}
	return out
}

// describeConsumer renders a consumer for errors and listings.
func describeConsumer(c a2redis.Consumer) string {
	if c.Log == nil {
		if c.PerSession > 0 {
			return fmt.Sprintf("%q (event and lane heads, at most %d per session in flight)", c.Name, c.PerSession)
		}
		return fmt.Sprintf("%q (event and lane heads)", c.Name)
	}
	types := "every type"
	if c.Log.Types != nil {
		types = "types " + strings.Join(c.Log.Types, ",")
	}
	return fmt.Sprintf("%q (log lane %q, %s, backfill %v)", c.Name, c.Log.Lane, types, c.Log.Backfill)
}

// registryCopy is a store's copy of the prefix's consumer registry.
type registryCopy struct {
	version   int64
	consumers []a2redis.Consumer // by name; nil when the registry is empty
	paused    []string           // the paused consumers' names, sorted
	readAt    time.Time          // the system clock's (monotonic) time of the read
}

// registryState is what a registry change reads and writes.
type registryState struct {
	consumers []a2redis.Consumer
	paused    []string
}

// registry is the store's copy of the consumer registry and the lock that
// keeps refreshes one at a time.
type registry struct {
	mu      sync.Mutex
	current atomic.Pointer[registryCopy]
}

// readRegistry reads the registry record (version 0 and no consumers when
// there is none) and installs it as the store's copy.
func (s *Store) readRegistry(ctx context.Context) (*registryCopy, error) {
	c := s.client
	raw, err := s.do(ctx, c.B().Get().Key(keys.Consumers(s.cfg.Prefix)).Build()).ToString()
	cp := &registryCopy{readAt: time.Now()}
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return nil, fmt.Errorf("a2redis: reading the consumer registry: %w", err)
	default:
		var rec registryRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, fmt.Errorf("%w: the consumer registry %s: %v", a2redis.ErrUnexpectedReply, keys.Consumers(s.cfg.Prefix), err)
		}
		cp.version = rec.V
		for _, r := range rec.Consumers {
			cp.consumers = append(cp.consumers, fromRecord(r))
		}
		cp.paused = rec.Paused
	}
	s.reg.current.Store(cp)
	return cp, nil
}

// registered returns the store's copy of the registry, reading it again
// first when it is older than Config.ConsumerRefresh. A failed read keeps
// the old copy (and tries again on the next call): a registry that cannot
// be read never fails an operation.
func (s *Store) registered(ctx context.Context) []a2redis.Consumer {
	return s.registryNow(ctx).consumers
}

// registryNow is registered's copy, paused consumers included.
func (s *Store) registryNow(ctx context.Context) *registryCopy {
	cp := s.reg.current.Load()
	if cp == nil {
		return &registryCopy{}
	}
	if s.cfg.ConsumerRefresh < 0 || time.Since(cp.readAt) < s.cfg.ConsumerRefresh {
		return cp
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	if now := s.reg.current.Load(); now != cp {
		return now // another call refreshed it meanwhile
	}
	fresh, err := s.readRegistry(ctx)
	if err != nil {
		return cp
	}
	return fresh
}

// Paused returns the names of the consumers paused on the prefix, as of
// the store's copy of the registry (no call to Redis).
func (s *Store) Paused() []string {
	if cp := s.reg.current.Load(); cp != nil {
		return slices.Clone(cp.paused)
	}
	return nil
}

// Consumers returns the consumers the store serves: its copy of the
// prefix's consumer registry (read at New and again at most every
// Config.ConsumerRefresh while the store is used), which holds every
// consumer a store of the prefix declared (Config.Consumers) or
// AddConsumers added. Nil when the registry is empty: the store then serves
// every consumer and starts no log cursor by itself. It does not call
// Redis; ReadConsumers does.
func (s *Store) Consumers() []a2redis.Consumer {
	cp := s.reg.current.Load()
	if cp == nil {
		return nil
	}
	return slices.Clone(cp.consumers)
}

// Consumer returns the store's copy of the registry's entry for name, with
// its settings, and whether the registry holds it (no call to Redis).
func (s *Store) Consumer(name string) (a2redis.Consumer, bool) {
	if cp := s.reg.current.Load(); cp != nil {
		for _, c := range cp.consumers {
			if c.Name == name {
				return c, true
			}
		}
	}
	return a2redis.Consumer{}, false
}

// ReadConsumers reads the prefix's consumer registry (one GET), refreshes
// the store's copy with it, and returns its consumers with its version
// (0: nothing was ever registered).
func (s *Store) ReadConsumers(ctx context.Context) ([]a2redis.Consumer, int64, error) {
	cp, err := s.readRegistry(ctx)
	if err != nil {
		return nil, 0, err
	}
	return slices.Clone(cp.consumers), cp.version, nil
}

// AddConsumers registers consumers in the prefix's registry, so that every
// store of the prefix serves them within its Config.ConsumerRefresh: an
// append by any store starts their typed log cursors, and claims that name
// no consumers serve them. A consumer already registered with the same
// declaration is left as it is; one registered under its name with another
// declaration (another kind, lane, types or start) is an
// ErrConsumerMismatch, and nothing is written. A consumer's settings
// (PerSession, MaxFailures) are the newest AddConsumers': the same
// consumer with other settings changes them for every store of the prefix. A new typed log consumer
// starts in each session at its next append (from the start of the
// session's lifetime when its LogSpec says Backfill); sessions that get no
// further appends are reached by a backfill (WakeLog, or a2redis-inspect
// consumers backfill).
func (s *Store) AddConsumers(ctx context.Context, consumers ...a2redis.Consumer) error {
	if _, err := servedArg(consumers); err != nil {
		return err
	}
	for i, c := range consumers {
		for _, d := range consumers[:i] {
			if d.Name == c.Name && !sameConsumer(c, d) {
				return fmt.Errorf("%w: consumer %s is given twice, unlike", a2redis.ErrInvalidArgument, describeConsumer(c))
			}
		}
	}
	return s.changeRegistry(ctx, func(st registryState) (registryState, error) {
		out := slices.Clone(st.consumers)
		for _, c := range consumers {
			i := slices.IndexFunc(out, func(r a2redis.Consumer) bool { return r.Name == c.Name })
			switch {
			case i < 0:
				out = append(out, c)
			case !sameConsumer(out[i], c):
				return st, &ConsumerMismatchError{Declared: c, Registered: out[i]}
			default:
				out[i].PerSession, out[i].MaxFailures = c.PerSession, c.MaxFailures
			}
		}
		st.consumers = out
		return st, nil
	})
}

// RemoveConsumers removes consumers from the prefix's registry: stores stop
// starting their log cursors and claims that name no consumers stop serving
// them (within Config.ConsumerRefresh). Their heads already in sessions
// stay, and run again once the consumer is added back (or a claim names
// it). Names not registered are ignored.
func (s *Store) RemoveConsumers(ctx context.Context, names ...string) error {
	for i, n := range names {
		if err := check.Name(fmt.Sprintf("names[%d]", i), n); err != nil {
			return err
		}
	}
	return s.changeRegistry(ctx, func(st registryState) (registryState, error) {
		st.consumers = slices.DeleteFunc(slices.Clone(st.consumers), func(c a2redis.Consumer) bool { return slices.Contains(names, c.Name) })
		st.paused = slices.DeleteFunc(slices.Clone(st.paused), func(n string) bool { return slices.Contains(names, n) })
		return st, nil
	})
}

// PauseConsumer pauses a registered consumer on the whole prefix: every
// store's claims (ClaimAvailable, ClaimNext, and the next claim of
// CompleteAndClaim) skip its heads within Config.ConsumerRefresh, so they
// wait — nothing is counted as failed, appends still give it heads, and
// claims already made run to their end. A consumer not registered is an
// ErrInvalidArgument (register it first: a pause must name what it stops).
func (s *Store) PauseConsumer(ctx context.Context, name string) error {
	if err := check.Name("name", name); err != nil {
		return err
	}
	return s.changeRegistry(ctx, func(st registryState) (registryState, error) {
		if !slices.ContainsFunc(st.consumers, func(c a2redis.Consumer) bool { return c.Name == name }) {
			return st, check.Invalid("name", "names consumer %q, which the prefix's consumer registry does not hold", name)
		}
		st.paused = append(slices.Clone(st.paused), name)
		return st, nil
	})
}

// ResumeConsumer resumes a paused consumer, then announces on every shard
// of the ready index that work may be claimable (an empty announcement),
// so idle workers read the index at once instead of at their MaxWait.
// Resuming a consumer that is not paused changes nothing, and announces
// nothing.
func (s *Store) ResumeConsumer(ctx context.Context, name string) error {
	if err := check.Name("name", name); err != nil {
		return err
	}
	was := false
	err := s.changeRegistry(ctx, func(st registryState) (registryState, error) {
		was = slices.Contains(st.paused, name)
		st.paused = slices.DeleteFunc(slices.Clone(st.paused), func(n string) bool { return n == name })
		return st, nil
	})
	if err != nil || !was {
		return err
	}
	c := s.client
	cmds := make(rueidis.Commands, 0, s.cfg.ReadyShards)
	for shard := 0; shard < s.cfg.ReadyShards; shard++ {
		channel := keys.ReadyFor(s.cfg.Prefix, shard).WorkChannel()
		if s.cfg.ShardedPubSub {
			cmds = append(cmds, c.B().Spublish().Channel(channel).Message("").Build())
		} else {
			cmds = append(cmds, c.B().Publish().Channel(channel).Message("").Build())
		}
	}
	for _, r := range s.doMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("a2redis: announcing the resume of %q: %w", name, err)
		}
	}
	return nil
}

// changeRegistry applies change to the registry by compare and set,
// reading again and retrying when another process changed it in between.
func (s *Store) changeRegistry(ctx context.Context, change func(registryState) (registryState, error)) error {
	locking, err := s.keyLocking(ctx)
	if err != nil {
		return err
	}
	lua := scripts.All()["consumers_put"].Lua(locking)
	k := []string{keys.Consumers(s.cfg.Prefix), keys.ConsumersSentinel(s.cfg.Prefix)}
	for try := 0; try < registryTries; try++ {
		cp, err := s.readRegistry(ctx)
		if err != nil {
			return err
		}
		st, err := change(registryState{consumers: cp.consumers, paused: cp.paused})
		if err != nil {
			return err
		}
		next := st.consumers
		slices.Sort(st.paused)
		st.paused = slices.Compact(st.paused)
		if len(next) == len(cp.consumers) && slices.EqualFunc(next, cp.consumers, sameSettings) && slices.Equal(st.paused, cp.paused) {
			return nil // nothing to change
		}
		if len(next) > MaxConsumers {
			return check.Invalid("consumers", "would make %d registered consumers, more than %d", len(next), MaxConsumers)
		}
		slices.SortFunc(next, func(a, b a2redis.Consumer) int { return strings.Compare(a.Name, b.Name) })
		recs := make([]consumerRecord, len(next))
		for i, c := range next {
			recs[i] = toRecord(c)
		}
		raw, _ := json.Marshal(recs)
		paused := st.paused
		if paused == nil {
			paused = []string{}
		}
		rawPaused, _ := json.Marshal(paused)
		var reply []string
		// Repeatable: a second run after a lost reply finds the version
		// moved and reports a conflict; the next round reads the result.
		err = s.retrying(ctx, true, func(ctx context.Context) error {
			r, err := lua.Exec(ctx, s.client, k, []string{itoa(cp.version), string(raw), string(rawPaused)}).ToArray()
			if err != nil {
				return err
			}
			reply = reply[:0]
			for _, m := range r {
				v, err := m.ToString()
				if err != nil {
					n, ierr := m.AsInt64()
					if ierr != nil {
						return fmt.Errorf("%w: consumers_put: %v", a2redis.ErrUnexpectedReply, err)
					}
					v = itoa(n)
				}
				reply = append(reply, v)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("a2redis: changing the consumer registry: %w", err)
		}
		if len(reply) > 0 && reply[0] == "ok" {
			_, err := s.readRegistry(ctx)
			return err
		}
	}
	return fmt.Errorf("%w: the consumer registry kept changing (%d rounds)", a2redis.ErrUnavailable, registryTries)
}

// ConsumerMismatchError is a consumer declared (Config.Consumers,
// AddConsumers) unlike the registry's consumer of that name. It matches
// a2redis.ErrConsumerMismatch.
type ConsumerMismatchError struct {
	// Declared is the consumer as declared.
	Declared a2redis.Consumer
	// Registered is the registry's consumer of that name.
	Registered a2redis.Consumer
}

// Error says both declarations.
func (e *ConsumerMismatchError) Error() string {
	return fmt.Sprintf("a2redis: consumer declared as %s but registered as %s: remove it from the registry first (a2redis-inspect consumers remove) or declare it as registered",
		describeConsumer(e.Declared), describeConsumer(e.Registered))
}

// Is matches a2redis.ErrConsumerMismatch.
func (e *ConsumerMismatchError) Is(target error) bool { return target == a2redis.ErrConsumerMismatch }
