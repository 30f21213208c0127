package redistest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// replicaTimeout bounds how long a spawned replica may take to finish its
// first synchronisation.
const replicaTimeout = 20 * time.Second

// SpawnReplicated starts a private master and one replica of it (see
// [SpawnServer]; extraArgs go to both), and waits until the master reports
// the replica online. Both are stopped at t.Cleanup. Restarting the
// replica ([Instance.Restart]) makes it resynchronise from the master; use
// [WaitReplicaOnline] to wait for that.
func SpawnReplicated(t testing.TB, extraArgs ...string) (master, replica *Instance) {
	t.Helper()
	master = SpawnServer(t, extraArgs...)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica = SpawnServer(t, append(append([]string(nil), extraArgs...), "--replicaof", host, port)...)
	WaitReplicaOnline(t, master)
	return master, replica
}

// WaitReplicaOnline waits until master reports a connected replica whose
// synchronisation is done, and fails the test if none is within a timeout.
func WaitReplicaOnline(t testing.TB, master *Instance) {
	t.Helper()
	deadline := time.Now().Add(replicaTimeout)
	for {
		info, err := respDo(master.Addr(), time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "state=online") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no replica of %s online within %v (last INFO replication err=%v):\n%s", master.Addr(), replicaTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
