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
// [SpawnServer]; extraArgs go to both, and the master starts a replica's
// synchronisation at once), and waits until the master reports
// the replica online. Both are stopped at t.Cleanup. Restarting the
// replica ([Instance.Restart]) makes it resynchronise from the master; use
// [WaitReplicaOnline] to wait for that.
func SpawnReplicated(t testing.TB, extraArgs ...string) (master, replica *Instance) {
	t.Helper()
	// No 5s wait for more replicas before a diskless sync.
	master = SpawnServer(t, append([]string{"--repl-diskless-sync-delay", "0"}, extraArgs...)...)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica = SpawnServer(t, append(append([]string(nil), extraArgs...), "--replicaof", host, port)...)
	WaitReplicaOnline(t, master, replica)
	return master, replica
}

// WaitReplicaOnline waits until master reports replica connected and in
// sync (state=online) and replica reports its link to master up (its copy
// loaded), and fails the test if that takes longer than a timeout.
func WaitReplicaOnline(t testing.TB, master, replica *Instance) {
	t.Helper()
	deadline := time.Now().Add(replicaTimeout)
	_, port, _ := net.SplitHostPort(replica.Addr())
	for {
		info, err := respDo(master.Addr(), time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "port="+port+",state=online") {
			var mine string
			if mine, err = respDo(replica.Addr(), time.Second, "INFO", "replication"); err == nil && strings.Contains(mine, "master_link_status:up") {
				return
			}
			info = mine
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s of %s not in sync within %v (last INFO replication err=%v):\n%s", replica.Addr(), master.Addr(), replicaTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
