package conformance

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/scripts"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var (
	flagSeed  = flag.Int64("seed", 0, "differential: run only this seed")
	flagOps   = flag.Int("ops", 0, "differential: operations per seed")
	flagSeeds = flag.Int("seeds", 0, "differential: how many seeds")
	flagSoak  = flag.Duration("soak", 0, "differential: run seeds for this long (also "+EnvSoak+")")
	// -scripts=general runs every store through the general scripts only
	// (scripts.SetGeneralOnly): the flat fast paths the store tries first
	// never run, so the same seeds cover both.
	flagScripts = flag.String("scripts", "", "differential: 'general' runs the general scripts only, never the flat fast paths")
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
		repro := fmt.Sprintf("go test ./conformance -run 'TestDifferential/^%s$' -count=1 -seed=%d -ops=%d", target, seed, n)
		if *flagScripts != "" {
			repro += " -scripts=" + *flagScripts
		}
		return repro
	}
	return o
}

// TestDifferential drives the Redis store and the model with the same
// seeded operations: 50 seeds of 400 operations against a spawned
// redis-server, 12 of 150 on miniredis, 6 of 200 on the spawned cluster
// (every session in its own slot, the ready index's shards on other
// nodes). -seed, -ops, -seeds and -soak (or the A2REDIS_* variables) change
// that; -scripts=general runs the same seeds through the general scripts
// only (CI runs both).
func TestDifferential(t *testing.T) {
	general := false
	switch *flagScripts {
	case "":
	case "general":
		general = true
		scripts.SetGeneralOnly(true)
		t.Cleanup(func() { scripts.SetGeneralOnly(false) })
	default:
		t.Fatalf("-scripts=%q: want general or nothing", *flagScripts)
	}
	// The paths the seeds took: with -scripts=general no flat script may
	// have run; without, the flat scripts must have (else the two runs
	// would test the same path).
	flat := []string{"append_one", "append_targeted", "append_plain", "claim_fast", "complete_fast"}
	before := map[string]int64{}
	for _, name := range flat {
		before[name] = scripts.All()[name].Runs()
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		for _, name := range flat {
			runs := scripts.All()[name].Runs() - before[name]
			switch {
			case general && runs > 0:
				t.Errorf("-scripts=general: the flat script %s ran %d times", name, runs)
			case !general && runs == 0:
				t.Errorf("the flat script %s never ran: the seeds do not reach its path", name)
			}
		}
	})
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
