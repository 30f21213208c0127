package a2redis_test

import (
	"os"
	"testing"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/conformance"
	"github.com/a2redis/a2redis/internal/keylockproxy"
	"github.com/a2redis/a2redis/internal/redistest"
)

// TestConformance runs the contract (package conformance) against every
// target. Each target only names its client and what its server can do.
//
//   - miniredis: embedded, no real-time TTLs, no sharded pub/sub.
//   - redis: the spawned redis-server.
//   - cluster: the spawned 3-master Redis Cluster.
//   - keylock: an Upstash-style key-locking server — a spawned redis-server
//     behind internal/keylockproxy, which accepts the allow-key-locking
//     flag, refuses scripts without it, and refuses any script command that
//     touches a key outside its declared hash tag.
//   - url: A2REDIS_TEST_URL, when set (any server; assumed plain Redis).
//
// The Docker image targets (valkey8, redis7) run in the module of
// internal/redistest/dockertarget, so that testcontainers-go stays out of
// this module's requirements.
func TestConformance(t *testing.T) {
	real := conformance.Features{Expiry: true, ShardedPubSub: true}

	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, func(t *testing.T) conformance.Target {
			_, client := redistest.Miniredis(t)
			return conformance.Target{Name: "miniredis", Client: client}
		})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, func(t *testing.T) conformance.Target {
			return conformance.Target{Name: "redis", Client: redistest.Server(t), Features: real}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		features := real
		features.Cluster = true
		conformance.Run(t, func(t *testing.T) conformance.Target {
			return conformance.Target{Name: "cluster", Client: redistest.Cluster(t), Features: features}
		})
	})
	t.Run("keylock", func(t *testing.T) {
		t.Parallel()
		server := redistest.SpawnServer(t)
		proxy, err := keylockproxy.Start(keylockproxy.Options{Backend: server.Addr(), RequireFlag: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s := proxy.Stats()
			t.Logf("key-locking proxy: %+v", s)
			if s.Flagged == 0 || s.Plain != 0 {
				t.Errorf("every store script carries the key-locking flag: %+v", s)
			}
			_ = proxy.Close()
		})
		features := real
		features.KeyLocking = true
		conformance.Run(t, func(t *testing.T) conformance.Target {
			return conformance.Target{Name: "keylock", Client: client(t, rueidis.ClientOption{InitAddress: []string{proxy.Addr()}}), Features: features}
		})
	})
	if url := os.Getenv(redistest.EnvURL); url != "" {
		t.Run("url", func(t *testing.T) {
			t.Parallel()
			conformance.Run(t, func(t *testing.T) conformance.Target {
				opt, err := rueidis.ParseURL(url)
				if err != nil {
					t.Fatalf("%s: %v", redistest.EnvURL, err)
				}
				return conformance.Target{Name: "url", Client: client(t, opt), Features: conformance.Features{Expiry: true}}
			})
		})
	}
}

// client connects a standalone client (no cluster discovery, no
// client-side cache), closed at t.Cleanup.
func client(t *testing.T, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opt.ForceSingleClient, opt.DisableCache = true, true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to %v: %v", opt.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}
