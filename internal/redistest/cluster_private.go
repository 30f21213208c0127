package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ErrBusyKey is wrapped by the error of [ClusterInstance.MigrateSlot] and
// [ClusterInstance.Reshard] when MIGRATE found the key already on the
// importing node (BUSYKEY): something created a key of the slot there while
// the source still held it. Neither replaces the key: a test must see it.
var ErrBusyKey = errors.New("redistest: MIGRATE found the key on the importing node (BUSYKEY)")

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// ClusterInstance is a private 3-master Redis Cluster started by
// [SpawnCluster] (no replicas) or [SpawnClusterWith]: unlike the shared one
// of [ClusterAddrs], a test may move its slots around, fail masters over
// ([ClusterInstance.Failover]) and kill nodes ([ClusterInstance.Kill]). Its
// methods are safe for concurrent use, but only one slot move (MigrateSlot
// or Reshard) or failover should run at a time. Methods that ask every node
// skip the nodes Kill stopped.
type ClusterInstance struct {
	procs  []*process
	cli    string                    // the redis-cli binary
	ids    []string                  // node ids, in the order of procs
	admins map[string]rueidis.Client // a standalone client per node address

	mu     sync.Mutex
	killed map[string]bool // addresses of the nodes Kill stopped
}

// ClusterOptions tunes [SpawnClusterWith]. The zero value is
// [SpawnCluster]'s cluster.
type ClusterOptions struct {
	// ReplicasPerMaster is how many replicas each of the three masters gets
	// (`redis-cli --cluster create --cluster-replicas`, which picks which
	// node replicates which master). Default 0.
	ReplicasPerMaster int
	// NodeTimeout is every node's cluster-node-timeout: how long a master
	// may stay unreachable before the cluster marks it failed and one of its
	// replicas takes over. Default 0: Redis's (15s). A few seconds also
	// spread role changes sooner (the nodes ping each other at least every
	// half timeout): SpawnClusterWith and Failover wait until every node
	// knows every node's role, which takes several seconds at the default.
	NodeTimeout time.Duration
	// ExtraArgs are appended to every node's redis-server arguments.
	ExtraArgs []string
	// Bins, when set, are the server and cli binaries to run (e.g.
	// [Valkey]'s) instead of redis-server and redis-cli on PATH.
	Bins Binaries
}

// SpawnCluster starts a fresh, private 3-master Redis Cluster (three
// redis-server processes joined with `redis-cli --cluster create`, no
// replicas) and waits until every node reports it healthy. The nodes are
// stopped and their directory removed at t.Cleanup (or by [Main]). Without
// redis-server or redis-cli on PATH the test is skipped, or fails when
// [RequireReal].
func SpawnCluster(t testing.TB) *ClusterInstance {
	t.Helper()
	return SpawnClusterWith(t, ClusterOptions{})
}

// SpawnClusterWith is [SpawnCluster] tuned by opts: with
// opts.ReplicasPerMaster, 3·(1+ReplicasPerMaster) nodes, and it also waits
// until every replica is in sync with its master (see
// [ClusterInstance.WaitSynced]) and every node knows every node's role.
func SpawnClusterWith(t testing.TB, opts ClusterOptions) *ClusterInstance {
	t.Helper()
	if opts.Bins == (Binaries{}) {
		requireBinaries(t, "redis-server", "redis-cli")
	}
	if opts.ReplicasPerMaster < 0 || opts.NodeTimeout < 0 {
		t.Fatalf("redistest: ClusterOptions %+v: negative", opts)
	}
	if opts.NodeTimeout > 0 && opts.NodeTimeout < time.Millisecond {
		// Redis takes milliseconds: a bare 3000 (3µs) would be a timeout of 0.
		t.Fatalf("redistest: ClusterOptions.NodeTimeout %v is under a millisecond (a duration, e.g. 3 * time.Second)", opts.NodeTimeout)
	}
	dir, err := tempDir("redistest-pcluster-")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	procs, err := startClusterWith(dir, opts)
	if err != nil {
		removeDir(dir)
		t.Fatalf("redistest: spawn cluster: %v", err)
	}
	c := &ClusterInstance{procs: procs, cli: opts.Bins.cli(), admins: map[string]rueidis.Client{}, killed: map[string]bool{}}
	t.Cleanup(func() {
		for _, a := range c.admins {
			a.Close()
		}
		c.mu.Lock()
		current := slices.Clone(c.procs) // with restarted nodes
		c.mu.Unlock()
		for _, p := range current {
			p.stop()
		}
		removeDir(dir)
	})
	for _, p := range procs {
		id, err := respDo(p.addr, time.Second, "CLUSTER", "MYID")
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", p.addr, err)
		}
		c.ids = append(c.ids, id)
		admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatalf("redistest: admin client for %s: %v", p.addr, err)
		}
		c.admins[p.addr] = admin
	}
	if opts.ReplicasPerMaster > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		defer cancel()
		err := c.WaitSynced(ctx)
		if err == nil {
			// Every node must know the replicas as such, too.
			err = c.waitAgreed(ctx)
		}
		if err != nil {
			t.Fatalf("redistest: spawn cluster: %v%s", err, clusterLogs(procs))
		}
	}
	return c
}

// live returns the nodes Kill has not stopped, in the order of procs.
func (c *ClusterInstance) live() []*process {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*process, 0, len(c.procs))
	for _, p := range c.procs {
		if !c.killed[p.addr] {
			out = append(out, p)
		}
	}
	return out
}

// Addrs returns the host:port of every node, in a fixed order (a fresh
// slice).
func (c *ClusterInstance) Addrs() []string {
	out := make([]string, len(c.procs))
	for i, p := range c.procs {
		out[i] = p.addr
	}
	return out
}

// NodeIDs returns the cluster node id of every node, in the order of
// [ClusterInstance.Addrs] (a fresh slice).
func (c *ClusterInstance) NodeIDs() []string { return slices.Clone(c.ids) }

// NodeID returns the cluster node id of the node at addr ("" if none).
func (c *ClusterInstance) NodeID(addr string) string {
	for i, p := range c.procs {
		if p.addr == addr {
			return c.ids[i]
		}
	}
	return ""
}

// AddrOf returns the address of the node with the given id ("" if none).
func (c *ClusterInstance) AddrOf(id string) string {
	for i, nid := range c.ids {
		if nid == id {
			return c.procs[i].addr
		}
	}
	return ""
}

// Client returns a rueidis cluster client on this cluster (DisableCache,
// ShuffleInit, like [Cluster]), closed at t.Cleanup. The test fails if the
// client does not come up in cluster mode.
func (c *ClusterInstance) Client(t testing.TB) rueidis.Client {
	t.Helper()
	cl := newClient(t, rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true, ShuffleInit: true})
	if mode := cl.Mode(); mode != rueidis.ClientModeCluster {
		t.Fatalf("redistest: cluster client is in %q mode, want %q", mode, rueidis.ClientModeCluster)
	}
	return cl
}

// KeySlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its hash tag (the bytes between the first '{' and the next '}'
// when not empty), modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % ClusterSlots
}

// nodeSlots parses a CLUSTER NODES reply into slot → owner node id, as that
// node sees it (migrating/importing markers are skipped).
func nodeSlots(nodes string) (map[int]string, error) {
	// RESP3 answers with a verbatim string, which rueidis leaves typed.
	nodes = strings.TrimPrefix(nodes, "txt:")
	owners := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: CLUSTER NODES slot range %q", r)
			}
			for s := a; s <= b; s++ {
				owners[s] = f[0]
			}
		}
	}
	return owners, nil
}

// views returns every live node's slot → owner map, with the nodes'
// addresses.
func (c *ClusterInstance) views(ctx context.Context) ([]map[int]string, []string, error) {
	var out []map[int]string
	var addrs []string
	for _, p := range c.live() {
		a := c.admins[p.addr]
		text, err := a.Do(ctx, a.B().ClusterNodes().Build()).ToString()
		if err != nil {
			return nil, nil, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", p.addr, err)
		}
		m, err := nodeSlots(text)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, m)
		addrs = append(addrs, p.addr)
	}
	return out, addrs, nil
}

// Owner returns the address of the node serving slot, as every node sees it;
// it fails when the nodes disagree or none serves it.
func (c *ClusterInstance) Owner(ctx context.Context, slot int) (string, error) {
	views, addrs, err := c.views(ctx)
	if err != nil {
		return "", err
	}
	owner := ""
	for i, v := range views {
		id := v[slot]
		if id == "" {
			return "", fmt.Errorf("redistest: node %s sees no owner of slot %d", addrs[i], slot)
		}
		if owner != "" && id != owner {
			return "", fmt.Errorf("redistest: nodes disagree on the owner of slot %d (%s, %s)", slot, owner, id)
		}
		owner = id
	}
	if addr := c.AddrOf(owner); addr != "" {
		return addr, nil
	}
	return "", fmt.Errorf("redistest: slot %d is owned by unknown node %s", slot, owner)
}

// SlotsOf returns the slots the node with the given id serves, as that node
// sees it, in ascending order.
func (c *ClusterInstance) SlotsOf(ctx context.Context, id string) ([]int, error) {
	addr := c.AddrOf(id)
	a, ok := c.admins[addr]
	if !ok {
		return nil, fmt.Errorf("redistest: unknown node %s", id)
	}
	text, err := a.Do(ctx, a.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", addr, err)
	}
	m, err := nodeSlots(text)
	if err != nil {
		return nil, err
	}
	var out []int
	for s, owner := range m {
		if owner == id {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out, nil
}

// OpenSlots returns the slots some node lists as migrating or importing
// (CLUSTER NODES' "[slot->-id]" and "[slot-<-id]" entries), ascending, each
// once.
func (c *ClusterInstance) OpenSlots(ctx context.Context) ([]int, error) {
	seen := map[int]bool{}
	for _, p := range c.live() {
		a := c.admins[p.addr]
		text, err := a.Do(ctx, a.B().ClusterNodes().Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", p.addr, err)
		}
		for _, f := range strings.Fields(text) {
			if !strings.HasPrefix(f, "[") {
				continue
			}
			end := strings.IndexAny(f, "-<>")
			if end < 0 {
				continue
			}
			if n, err := strconv.Atoi(f[1:end]); err == nil {
				seen[n] = true
			}
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}

// MigrateOptions tunes [ClusterInstance.MigrateSlot].
type MigrateOptions struct {
	// Pause is slept before each key's MIGRATE (and before the slot is
	// handed over), so that live commands run against the half-migrated
	// slot. Default 0.
	Pause time.Duration
	// Batch is how many keys one CLUSTER GETKEYSINSLOT asks for. Default
	// 1000.
	Batch int
	// Timeout is MIGRATE's timeout. Default 5s.
	Timeout time.Duration
	// Rand orders the keys of each batch; default a random source.
	Rand *rand.Rand
	// OnKey, when set, is called after each key has moved.
	OnKey func(key string)
}

// MigrateStats reports what a MigrateSlot moved.
type MigrateStats struct {
	// From and To are the source and target node addresses.
	From, To string
	// Keys is how many keys MIGRATE moved.
	Keys int
	// Vanished is how many listed keys were gone when their MIGRATE ran
	// (NOKEY: deleted or expired in between).
	Vanished int
	// Rounds is how many CLUSTER GETKEYSINSLOT calls listed keys.
	Rounds int
}

// MigrateSlot moves slot to the node at toAddr by hand, the way
// redis-cli does it, but one key at a time in random order: CLUSTER SETSLOT
// IMPORTING on the target and MIGRATING on the source, then CLUSTER
// GETKEYSINSLOT until the source lists no key (keys listed are migrated one
// MIGRATE each, shuffled, with opts.Pause before each), then CLUSTER SETSLOT
// NODE on the target, the source and every other live master, and it
// returns once every node names the target the owner (at most 10s). A
// BUSYKEY from
// MIGRATE fails the move with an error wrapping [ErrBusyKey] and leaves the
// slot half-migrated (nothing is replaced). It fails when the slot already
// is on toAddr.
func (c *ClusterInstance) MigrateSlot(ctx context.Context, slot int, toAddr string, opts MigrateOptions) (MigrateStats, error) {
	if opts.Batch <= 0 {
		opts.Batch = 1000
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	rnd := opts.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	st := MigrateStats{To: toAddr}
	from, err := c.Owner(ctx, slot)
	if err != nil {
		return st, err
	}
	st.From = from
	if from == toAddr {
		return st, fmt.Errorf("redistest: slot %d already is on %s", slot, toAddr)
	}
	src, dst := c.admins[from], c.admins[toAddr]
	if dst == nil {
		return st, fmt.Errorf("redistest: %s is not a node of this cluster", toAddr)
	}
	srcID, dstID := c.NodeID(from), c.NodeID(toAddr)
	sl := strconv.Itoa(slot)
	if err := dst.Do(ctx, dst.B().Arbitrary("CLUSTER", "SETSLOT").Args(sl, "IMPORTING", srcID).Build()).Error(); err != nil {
		return st, fmt.Errorf("redistest: CLUSTER SETSLOT %d IMPORTING on %s: %w", slot, toAddr, err)
	}
	if err := src.Do(ctx, src.B().Arbitrary("CLUSTER", "SETSLOT").Args(sl, "MIGRATING", dstID).Build()).Error(); err != nil {
		return st, fmt.Errorf("redistest: CLUSTER SETSLOT %d MIGRATING on %s: %w", slot, from, err)
	}
	host, port, _ := net.SplitHostPort(toAddr)
	timeout := strconv.FormatInt(opts.Timeout.Milliseconds(), 10)
	for {
		names, err := src.Do(ctx, src.B().Arbitrary("CLUSTER", "GETKEYSINSLOT").Args(sl, strconv.Itoa(opts.Batch)).Build()).AsStrSlice()
		if err != nil {
			return st, fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %w", slot, from, err)
		}
		if len(names) == 0 {
			break
		}
		st.Rounds++
		rnd.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, key := range names {
			if err := sleepCtx(ctx, opts.Pause); err != nil {
				return st, err
			}
			reply, err := src.Do(ctx, src.B().Arbitrary("MIGRATE").Args(host, port, key, "0", timeout).Build()).ToString()
			if err != nil {
				if strings.Contains(err.Error(), "BUSYKEY") {
					return st, fmt.Errorf("%w: slot %d key %q from %s to %s: %v", ErrBusyKey, slot, key, from, toAddr, err)
				}
				return st, fmt.Errorf("redistest: MIGRATE %q (slot %d) from %s to %s: %w", key, slot, from, toAddr, err)
			}
			if reply == "NOKEY" {
				st.Vanished++
				continue
			}
			st.Keys++
			if opts.OnKey != nil {
				opts.OnKey(key)
			}
		}
	}
	if err := sleepCtx(ctx, opts.Pause); err != nil {
		return st, err
	}
	order := []string{toAddr, from}
	for _, p := range c.live() {
		if p.addr == toAddr || p.addr == from {
			continue
		}
		// A replica refuses SETSLOT; it learns from its master.
		if n, err := c.self(ctx, p.addr); err == nil && !n.Master {
			continue
		}
		order = append(order, p.addr)
	}
	for _, addr := range order {
		a := c.admins[addr]
		if err := a.Do(ctx, a.B().Arbitrary("CLUSTER", "SETSLOT").Args(sl, "NODE", dstID).Build()).Error(); err != nil {
			return st, fmt.Errorf("redistest: CLUSTER SETSLOT %d NODE on %s: %w", slot, addr, err)
		}
	}
	// Wait until every node names the new owner before the next move: two
	// nodes importing at once can bump their config epochs without
	// consensus to the same value, and quick moves there and back then left
	// Redis 7.0.15 with two nodes each naming the other the slot's owner.
	deadline := time.Now().Add(10 * time.Second)
	for {
		owner, err := c.Owner(ctx, slot)
		if err == nil && owner == toAddr {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("redistest: slot %d handed to %s, but the nodes do not agree within 10s (owner %q, %v)", slot, toAddr, owner, err)
		}
		if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
			return st, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Reshard moves nSlots slots from the node with id fromID to the node with
// id toID with `redis-cli --cluster reshard <node> --cluster-from fromID
// --cluster-to toID --cluster-slots nSlots --cluster-yes` (redis-cli picks
// the source's lowest slots and moves their keys in pipelined MIGRATE
// batches, without --cluster-replace), with extraArgs appended (e.g.
// "--cluster-pipeline", "1"), then waits for [ClusterInstance.WaitAgreed].
// A failure returns redis-cli's output; a BUSYKEY wraps [ErrBusyKey].
// Mind that a master left without slots turns into a replica of the node
// that took them (Redis 7's cluster-allow-replica-migration).
func (c *ClusterInstance) Reshard(ctx context.Context, fromID, toID string, nSlots int, extraArgs ...string) error {
	if err := c.WaitAgreed(ctx); err != nil {
		return err
	}
	args := []string{"--cluster", "reshard", c.procs[0].addr,
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(nSlots), "--cluster-yes"}
	cmd := exec.CommandContext(ctx, c.cli, append(args, extraArgs...)...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err == nil && strings.Contains(string(out), "[ERR]") {
		err = errors.New("output reports an error")
	}
	if err != nil {
		text := tailLines(string(out), 40)
		if strings.Contains(string(out), "BUSYKEY") {
			return fmt.Errorf("%w: redis-cli --cluster reshard: %v\n%s", ErrBusyKey, err, text)
		}
		return fmt.Errorf("redistest: redis-cli --cluster reshard: %v\n%s", err, text)
	}
	return c.WaitAgreed(ctx)
}

// WaitAgreed waits (within ctx, at most 30s) until every node reports
// cluster_state:ok with every slot assigned and `redis-cli --cluster check`
// finds nothing wrong (no open slot, every node agreeing on the slots).
func (c *ClusterInstance) WaitAgreed(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout)
	defer cancel()
	var last string
	for {
		ok := true
		live := c.live()
		for _, p := range live {
			info, err := respDo(p.addr, time.Second, "CLUSTER", "INFO")
			if err != nil || !clusterReady(info, len(c.procs)) {
				ok = false
				last = fmt.Sprintf("CLUSTER INFO on %s: %v\n%s", p.addr, err, info)
				break
			}
		}
		if ok {
			cmd := exec.CommandContext(ctx, c.cli, "--cluster", "check", live[0].addr)
			cmd.SysProcAttr = sysProcAttr()
			out, err := cmd.CombinedOutput()
			if err == nil && !strings.Contains(string(out), "[ERR]") && !strings.Contains(string(out), "[WARNING]") {
				return nil
			}
			last = fmt.Sprintf("redis-cli --cluster check: %v\n%s", err, tailLines(string(out), 20))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("redistest: cluster did not settle: %w; last: %s", err, last)
		}
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
