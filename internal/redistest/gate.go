package redistest

import (
	"os"
	"testing"
)

// EnvChaos names the environment variable that runs the chaos tests
// (`make chaos`): failovers on node timeouts, killed and stopped processes,
// slot moves under load, AOF fsync waits. Their outcome depends on how
// the machine schedules processes and on wall-clock timeouts, not only on
// the code under test, so the CI run (`make test`, `make test-valkey`,
// `make test-race`) leaves them out; docs/testing.md lists them with their
// last results.
const EnvChaos = "A2REDIS_CHAOS"

// Chaos skips t unless A2REDIS_CHAOS is set to a non-empty value other than
// "0". Call it first in a chaos test.
func Chaos(t testing.TB) {
	t.Helper()
	if v := os.Getenv(EnvChaos); v == "" || v == "0" {
		t.Skipf("a chaos test (timing-dependent: node timeouts, killed or stopped processes, moves under load): runs with %s=1 (make chaos)", EnvChaos)
	}
}
