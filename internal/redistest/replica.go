package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
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
	requireBinaries(t, "redis-server")
	return spawnReplicated(t, "redis-server", extraArgs)
}

// SpawnReplicatedFrom is [SpawnReplicated] with the server binary of bins
// (e.g. [Valkey]'s).
func SpawnReplicatedFrom(t testing.TB, bins Binaries, extraArgs ...string) (master, replica *Instance) {
	t.Helper()
	return spawnReplicated(t, bins.server(), extraArgs)
}

func spawnReplicated(t testing.TB, bin string, extraArgs []string) (master, replica *Instance) {
	t.Helper()
	// No 5s wait for more replicas before a diskless sync.
	master = spawnServer(t, bin, append([]string{"--repl-diskless-sync-delay", "0"}, extraArgs...))
	host, port, _ := net.SplitHostPort(master.Addr())
	replica = spawnServer(t, bin, append(append([]string(nil), extraArgs...), "--replicaof", host, port))
	WaitReplicaOnline(t, master, replica)
	return master, replica
}

// WaitReplicaOnline waits until replica is in sync with master and its
// acknowledgements flow: master reports it online, replica reports its
// link up, and master has an acknowledgement from it of an offset past a
// PUBLISH sent after that (a diskless sync only starts the command stream
// once the replica first acknowledges, up to a second later). It fails the
// test if that takes longer than a timeout.
func WaitReplicaOnline(t testing.TB, master, replica *Instance) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), replicaTimeout)
	defer cancel()
	if err := waitSynced(ctx, master.Addr(), replica.Addr()); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// waitSynced is WaitReplicaOnline on addresses, within ctx: it returns an
// error with the master's last INFO replication when ctx ends first.
func waitSynced(ctx context.Context, masterAddr, replicaAddr string) error {
	_, port, _ := net.SplitHostPort(replicaAddr)
	var target int64 = -1
	for {
		info, err := respDo(masterAddr, time.Second, "INFO", "replication")
		if err == nil {
			acked, online := replicaOffset(info, port)
			switch {
			case !online:
			case target < 0:
				var mine string
				if mine, err = respDo(replicaAddr, time.Second, "INFO", "replication"); err == nil && strings.Contains(mine, "master_link_status:up") {
					// PUBLISH is replicated (outside a cluster) and writes
					// no key.
					if _, err = respDo(masterAddr, time.Second, "PUBLISH", "redistest:replica-sync", "1"); err == nil {
						info, err = respDo(masterAddr, time.Second, "INFO", "replication")
						target = infoInt(info, "master_repl_offset")
					}
				}
			case acked >= target:
				return nil
			}
		}
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return fmt.Errorf("replica %s of %s not in sync: %w (last INFO replication err=%v):\n%s", replicaAddr, masterAddr, ctx.Err(), err, info)
		}
	}
}

// replicaOffset finds the replica on port in a master's INFO replication:
// the offset it acknowledged, and whether it is online.
func replicaOffset(info, port string) (int64, bool) {
	for _, line := range strings.Split(info, "\n") {
		_, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.Contains(fields, "port="+port+",") {
			continue
		}
		var offset int64 = -1
		online := false
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "state":
				online = v == "online"
			case "offset":
				offset, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return offset, online
	}
	return -1, false
}

// infoInt is a numeric field of an INFO reply, or -1.
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
