package dockertarget_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/conformance"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/redistest/dockertarget"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestConformance runs the contract (package conformance) against servers
// started from Docker images: valkey8 and redis7, each skipped when no
// Docker engine answers. The other targets (miniredis, the spawned
// redis-server and Cluster, the key-locking proxy) run in the root module's
// TestConformance; these live here, in a module of their own, so that
// testcontainers-go stays out of what an application importing a2redis
// downloads.
func TestConformance(t *testing.T) {
	real := conformance.Features{Expiry: true, ShardedPubSub: true}
	for _, image := range []struct{ name, image string }{{"valkey8", "valkey/valkey:8"}, {"redis7", "redis:7"}} {
		t.Run(image.name, func(t *testing.T) {
			t.Parallel()
			addr := dockertarget.Start(t, image.image)
			conformance.Run(t, func(t *testing.T) conformance.Target {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
				if err != nil {
					t.Fatalf("connect to %s: %v", addr, err)
				}
				t.Cleanup(c.Close)
				return conformance.Target{Name: image.name, Client: c, Features: real}
			})
		})
	}
}
