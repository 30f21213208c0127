package conformance

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/a2redis/a2redis/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	flagSeed  = flag.Int64("seed", 0, "differential: run only this seed")
	flagOps   = flag.Int("ops", 0, "differential: operations per seed")
	flagSeeds = flag.Int("seeds", 0, "differential: how many seeds")
	flagSoak  = flag.Duration("soak", 0, "differential: run seeds for this long (also "+EnvSoak+")")
)

// diffOptions turns the flags into options, over per-target defaults.
func diffOptions(target string, seeds, ops int) DifferentialOptions {
	o := DifferentialOptions{Seeds: seeds, Ops: ops, Soak: *flagSoak}
	if *flagSeeds > 0 {
		o.Seeds = *flagSeeds
	}
	if *flagOps > 0 {
		o.Ops = *flagOps
	}
	if *flagSeed != 0 {
		o.FirstSeed, o.Seeds = *flagSeed, 1
	}
	if o.Soak == 0 {
		if v := os.Getenv(EnvSoak); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				panic(fmt.Sprintf("%s=%q: %v", EnvSoak, v, err))
			}
			o.Soak = d
		}
	}
	o.Repro = func(seed int64, n int) string {
		return fmt.Sprintf("go test ./conformance -run 'TestDifferential/^%s$' -count=1 -seed=%d -ops=%d", target, seed, n)
	}
	return o
}

// TestDifferential drives the Redis store and the model with the same
// seeded operations: 50 seeds of 400 operations against a spawned
// redis-server, 12 of 150 on miniredis, 6 of 200 on the spawned cluster
// (every session in its own slot, the ready index's shards on other
// nodes). -seed, -ops, -seeds and -soak (or the A2REDIS_* variables) change
// that.
func TestDifferential(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		tg := Target{Name: "redis", Client: redistest.Server(t)}
		differential(t, tg, diffOptions("redis", 50, 400))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, client := redistest.Miniredis(t)
		differential(t, Target{Name: "miniredis", Client: client}, diffOptions("miniredis", 12, 150))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		differential(t, Target{Name: "cluster", Client: redistest.Cluster(t)}, diffOptions("cluster", 6, 200))
	})
}
