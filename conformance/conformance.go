// Package conformance is the a2redis contract as an executable suite: Run
// takes a constructor of Targets (a server and what it can do) and checks
// every operation and outcome of the store against it, the way
// ThreeDotsLabs/watermill's pub/sub tests and river's driver tests do.
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) conformance.Target {
//			return conformance.Target{Client: myClient(t), Features: conformance.Features{Expiry: true}}
//		})
//	}
//
// Each test isolates itself on a key prefix derived from its name and a
// random suffix, so tests run in parallel and nothing flushes a database.
// A test that needs a capability a target lacks skips, naming the missing
// feature.
//
// The suite also holds a randomized differential test (Differential) that
// drives a Redis store and the in-memory model of the contract with the same
// operations and compares every result and the final state.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

// Features says what a target can do. Tests that need a feature the target
// lacks skip, naming it.
type Features struct {
	// Cluster: the target is a Redis Cluster; a session's keys live on one
	// node, different sessions spread over several.
	Cluster bool
	// KeyLocking: the server accepts Upstash's allow-key-locking script flag
	// (store.KeyLockingEnabled must report it).
	KeyLocking bool
	// Expiry: key TTLs (PEXPIRE) run in real time (miniredis needs
	// FastForward).
	Expiry bool
	// ShardedPubSub: the server has SPUBLISH/SSUBSCRIBE.
	ShardedPubSub bool
}

// Target is one server the suite runs against.
type Target struct {
	// Client is a client to the server, owned by the target (close it in a
	// t.Cleanup of the constructor). Required.
	Client rueidis.Client
	// Features says what the server can do.
	Features Features
	// Config, when set, adjusts every store the suite builds (for example
	// the key-locking mode). The suite sets Prefix and Clock after it runs.
	Config func(*redisstore.Config)
	// Name names the target in reproduction commands; optional.
	Name string
}

// test is one contract test: a name (Group/Name), the features it needs
// and its body.
type test struct {
	name  string
	needs []feature
	body  func(t *testing.T, e *env)
}

// feature is one named capability a test may need.
type feature struct {
	name string
	has  func(Features) bool
}

var (
	needCluster       = feature{"Cluster", func(f Features) bool { return f.Cluster }}
	needExpiry        = feature{"Expiry", func(f Features) bool { return f.Expiry }}
	needShardedPubSub = feature{"ShardedPubSub", func(f Features) bool { return f.ShardedPubSub }}
)

var (
	registryMu sync.Mutex
	registry   []test
)

// contract registers a test of the suite.
func contract(name string, body func(t *testing.T, e *env), needs ...feature) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry = append(registry, test{name: name, needs: needs, body: body})
}

// Run runs the whole contract against targets made by newTarget, one
// parallel subtest per contract test (named Group/Name), each on its own key
// prefix and calling newTarget once.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	registryMu.Lock()
	tests := append([]test(nil), registry...)
	registryMu.Unlock()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg := newTarget(t)
			for _, f := range tc.needs {
				if !f.has(tg.Features) {
					t.Skipf("conformance: target lacks feature %s", f.name)
				}
			}
			tc.body(t, newEnv(t, tg))
		})
	}
}

// Prefix returns a key prefix unique to this test: its name reduced to
// [A-Za-z0-9_-] (at most 64 characters), a '-' and 16 random hex digits. It
// never holds a brace.
func Prefix(t testing.TB) string {
	var b strings.Builder
	for _, r := range t.Name() {
		if b.Len() >= 64 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return b.String() + "-" + hex.EncodeToString(rnd[:])
}

// Clock is a settable clock for stores under test: every stored time comes
// from it, so tests travel in time on real servers. Now and Advance come
// from the embedded clock.
type Clock struct {
	*redistest.Clock
}

// NewClock returns a clock at a fixed instant (2027-01-15).
func NewClock() *Clock {
	return &Clock{redistest.NewClock(time.UnixMilli(1_800_000_000_000))}
}

// env is one contract test's world: a store on its own prefix and clock.
type env struct {
	t      *testing.T
	ctx    context.Context
	tg     Target
	client rueidis.Client
	store  *redisstore.Store
	clock  *Clock
	prefix string
}

func newEnv(t *testing.T, tg Target) *env {
	t.Helper()
	if tg.Client == nil {
		t.Fatal("conformance: Target.Client is nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, tg: tg, client: tg.Client, clock: NewClock(), prefix: Prefix(t)}
	e.store = e.newStore()
	return e
}

// config is the store config of this env, with mutations applied last.
func (e *env) config(mutate ...func(*redisstore.Config)) redisstore.Config {
	var cfg redisstore.Config
	if e.tg.Config != nil {
		e.tg.Config(&cfg)
	}
	cfg.Prefix, cfg.Clock = e.prefix, e.clock.Now
	for _, m := range mutate {
		m(&cfg)
	}
	return cfg
}

func (e *env) newStore(mutate ...func(*redisstore.Config)) *redisstore.Store {
	e.t.Helper()
	s, err := redisstore.New(e.ctx, e.client, e.config(mutate...))
	if err != nil {
		e.t.Fatalf("redisstore.New: %v", err)
	}
	return s
}
