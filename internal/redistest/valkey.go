package redistest

import (
	"os"
	"path/filepath"
	"testing"
)

// Binaries names a server build other than the redis-server and redis-cli
// on PATH, for [SpawnServerFrom], [SpawnReplicatedFrom] and
// ClusterOptions.Bins. The zero value is the ones on PATH.
type Binaries struct {
	// Server and CLI are the paths of the server and of its cli.
	Server, CLI string
}

func (b Binaries) server() string {
	if b.Server == "" {
		return "redis-server"
	}
	return b.Server
}

func (b Binaries) cli() string {
	if b.CLI == "" {
		return "redis-cli"
	}
	return b.CLI
}

// ValkeyRel is where the tests that need Valkey (WAITAOF, Valkey's script
// cache) find its binaries, relative to the repository root: a checkout of
// the shared tree beside the clone (CI copies it there as ../shared).
const ValkeyRel = "../shared/servers/valkey-8.0.1/bin"

// Valkey returns Valkey 8.0.1's valkey-server and valkey-cli in ValkeyRel
// from the repository root (the nearest directory up from the working
// directory with a go.mod). When they are missing the test is skipped
// saying so, or fails when [RequireReal] (CI must run these tests).
func Valkey(t testing.TB) Binaries {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	root := dir
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(root)
		if up == root {
			t.Fatalf("redistest: no go.mod above %s", dir)
		}
		root = up
	}
	bin := filepath.Clean(filepath.Join(root, ValkeyRel))
	b := Binaries{Server: filepath.Join(bin, "valkey-server"), CLI: filepath.Join(bin, "valkey-cli")}
	for _, path := range []string{b.Server, b.CLI} {
		if _, err := os.Stat(path); err != nil {
			msg := "redistest: Valkey 8.0.1 not found in " + ValkeyRel + " from the repository root: " + err.Error()
			if RequireReal() {
				t.Fatal(msg + " [CI=true: a missing real server is a failure]")
			}
			t.Skip(msg)
		}
	}
	return b
}
