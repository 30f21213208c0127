// Package redistest starts Redis servers for tests: an embedded miniredis,
// a shared real redis-server, a shared 3-master Redis Cluster and private
// throwaway servers, each with a rueidis client where that makes sense.
//
// Test packages that use the real-server helpers must call [Main] from
// TestMain so that every spawned process is stopped and every temporary
// directory removed when the test binary ends:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// Spawned servers are also started with Pdeathsig (SIGKILL) on Linux, so they
// die with the test binary even if it is killed before Main can clean up.
//
// Environment:
//   - A2REDIS_TEST_URL: use this Redis (a redis:// or rediss:// URL, parsed
//     with rueidis.ParseURL) instead of spawning one for [ServerAddr]/[Server].
//   - A2REDIS_TEST_CLUSTER: comma-separated host:port seeds of an existing
//     cluster to use instead of spawning one for [ClusterAddrs]/[Cluster].
//   - CI=true: a missing redis-server/redis-cli is a test failure instead of
//     a skip (see [RequireReal]).
//
// Nothing in this package flushes a database: tests isolate their keys with
// [Prefix].
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// Environment variable names understood by this package.
const (
	// EnvURL names the variable holding a Redis URL to use instead of a
	// spawned server.
	EnvURL = "A2REDIS_TEST_URL"
	// EnvCluster names the variable holding comma-separated host:port seeds
	// of a cluster to use instead of a spawned one.
	EnvCluster = "A2REDIS_TEST_CLUSTER"
)

const (
	startTimeout   = 10 * time.Second // until a spawned server answers PING
	clusterTimeout = 30 * time.Second // until a spawned cluster reports ok
	stopTimeout    = 5 * time.Second  // SIGTERM grace period before SIGKILL
	startAttempts  = 3                // port retries when a bind fails
	logTailLines   = 30
)

// RequireReal reports whether real-server targets must run (CI=true): when
// it returns true, a missing redis-server or redis-cli fails the test
// instead of skipping it.
func RequireReal() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Main wraps testing.M: it runs the tests, then stops every server this
// package started (SIGTERM, then SIGKILL after a timeout), removes the
// temporary directories it created, and exits with the tests' exit code.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	shutdown()
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// Process registry.

var reg struct {
	mu    sync.Mutex
	procs map[*process]struct{}
	dirs  map[string]struct{}
}

func track(p *process) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.procs == nil {
		reg.procs = map[*process]struct{}{}
	}
	reg.procs[p] = struct{}{}
}

func untrack(p *process) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	delete(reg.procs, p)
}

func tempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.dirs == nil {
		reg.dirs = map[string]struct{}{}
	}
	reg.dirs[dir] = struct{}{}
	return dir, nil
}

func removeDir(dir string) {
	_ = os.RemoveAll(dir)
	reg.mu.Lock()
	defer reg.mu.Unlock()
	delete(reg.dirs, dir)
}

// shutdown stops every tracked process and removes every tracked directory.
func shutdown() {
	reg.mu.Lock()
	procs := make([]*process, 0, len(reg.procs))
	for p := range reg.procs {
		procs = append(procs, p)
	}
	reg.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop()
		}()
	}
	wg.Wait()

	reg.mu.Lock()
	dirs := make([]string, 0, len(reg.dirs))
	for d := range reg.dirs {
		dirs = append(dirs, d)
	}
	reg.mu.Unlock()
	for _, d := range dirs {
		removeDir(d)
	}
}

// process is one spawned redis-server.
type process struct {
	cmd     *exec.Cmd
	bin     string // the server binary it runs
	addr    string
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
	once    sync.Once
}

// startProcess starts the server binary bin (redis-server, or a path to
// one) with args, logging to logPath. It does not wait for the server to
// be ready.
func startProcess(bin, addr, logPath string, args []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	p := &process{cmd: cmd, bin: bin, addr: addr, logPath: logPath, done: make(chan struct{})}
	track(p)
	go func() {
		p.waitErr = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop terminates the process (SIGTERM, then SIGKILL after stopTimeout) and
// waits for it to exit. It is idempotent and safe for concurrent use.
func (p *process) stop() {
	p.once.Do(func() {
		defer untrack(p)
		select {
		case <-p.done:
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(stopTimeout):
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady waits until the server answers PING, the process exits, or the
// timeout passes.
func (p *process) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("redis-server on %s exited before answering PING (%v)\n%s", p.addr, p.waitErr, logTail(p.logPath))
		}
		reply, err := respDo(p.addr, time.Second, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		// A server started with --requirepass answers, refusing: it is up.
		if err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("unexpected PING reply %q", reply)
		}
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %v\n%s", p.addr, timeout, lastErr, logTail(p.logPath))
		}
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// launch starts a redis-server on a port chosen by pickPort, retrying with a
// new port (up to startAttempts times) when the server exits early, e.g.
// because another process took the port in the meantime.
func launch(bin, dir, name string, pickPort func() (int, error), args func(port int) []string) (*process, error) {
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := pickPort()
		if err != nil {
			lastErr = err
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		logPath := filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, port))
		p, err := startProcess(bin, addr, logPath, args(port))
		if err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		if err := p.waitReady(startTimeout); err != nil {
			p.stop()
			lastErr = err
			if p.exited() && strings.Contains(readFile(logPath), "Address already in use") {
				continue // lost a race for the port: try another one
			}
			return nil, err
		}
		return p, nil
	}
	return nil, fmt.Errorf("redis-server failed to start after %d attempts: %w", startAttempts, lastErr)
}

func serverArgs(dir string, port int, extra ...string) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
	}
	return append(args, extra...)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeClusterPort returns a port P such that both P and P+10000 (the cluster
// bus port) were free a moment ago, with P+10000 < 65536.
func freeClusterPort() (int, error) {
	const lo, hi = 20000, 55000 // P+10000 stays below 65536
	for range 50 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		p := lo + (int(b[0])<<8|int(b[1]))%(hi-lo)
		if portFree(p) && portFree(p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("no free port pair (P, P+10000) found")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// logTail returns the last lines of a server log, formatted for a failure
// message.
func logTail(path string) string {
	s := strings.TrimRight(readFile(path), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("--- tail of %s ---\n%s\n--- end of log ---", path, strings.Join(lines, "\n"))
}

// ---------------------------------------------------------------------------
// Minimal RESP client used to probe servers without a full client.

// respDo sends one command and returns a simple-string, integer or
// bulk-string reply as a string; an error reply becomes an error.
func respDo(addr string, timeout time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", errors.New("nil reply")
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unsupported reply %q", line)
	}
}

// ---------------------------------------------------------------------------
// Skip/fatal handling for missing binaries.

// requireBinaries skips the test (or fails it when RequireReal) unless every
// named binary is on PATH.
func requireBinaries(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			msg := fmt.Sprintf("redistest: %s not found on PATH (%v); install Redis or set %s/%s to use an existing server", name, err, EnvURL, EnvCluster)
			if RequireReal() {
				t.Fatal(msg + " [CI=true: a missing real server is a failure]")
			}
			t.Skip(msg)
		}
	}
}

// ---------------------------------------------------------------------------
// Prefix and Miniredis.

// Prefix returns a key prefix unique to this test: t.Name() sanitised to
// [A-Za-z0-9_-] (and shortened if long), a '-', and a random hex suffix. It
// never contains '{' or '}' and carries no trailing separator; callers add
// their own (e.g. Prefix(t)+":"). Every test should use its own prefix:
// nothing in this package flushes a database.
func Prefix(t testing.TB) string {
	t.Helper()
	const maxName = 64
	var b strings.Builder
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= maxName {
			break
		}
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatalf("redistest: random prefix: %v", err)
	}
	name := b.String()
	if name == "" {
		name = "test"
	}
	return name + "-" + hex.EncodeToString(rnd[:])
}

// Miniredis starts an embedded miniredis (miniredis.RunT, so it stops at the
// end of the test) and returns it with a rueidis client connected to it. The
// client uses ForceSingleClient and DisableCache, because miniredis refuses
// CLIENT TRACKING and answers CLUSTER SLOTS. The client is closed at
// t.Cleanup.
func Miniredis(t testing.TB) (*miniredis.Miniredis, rueidis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	return mr, newClient(t, rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		ForceSingleClient: true,
		DisableCache:      true,
	})
}

func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("redistest: connect to %v: %v", opt.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

// ---------------------------------------------------------------------------
// Shared standalone server.

var shared struct {
	once sync.Once
	addr string
	err  error
}

// ServerAddr returns the host:port of a real Redis for this test binary. If
// A2REDIS_TEST_URL is set, the address is parsed from it. Otherwise one
// redis-server is spawned per test binary on a free loopback port (no
// persistence, temporary --dir) and waited on until it answers PING; it is
// shared by all tests and stopped by [Main]. Without redis-server on PATH the
// test is skipped, or fails when [RequireReal].
func ServerAddr(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		opt, err := rueidis.ParseURL(u)
		if err != nil {
			t.Fatalf("redistest: parse %s: %v", EnvURL, err)
		}
		if len(opt.InitAddress) == 0 {
			t.Fatalf("redistest: %s has no address", EnvURL)
		}
		return opt.InitAddress[0]
	}
	requireBinaries(t, "redis-server")
	shared.once.Do(func() {
		dir, err := tempDir("redistest-server-")
		if err != nil {
			shared.err = err
			return
		}
		p, err := launch("redis-server", dir, "redis", freePort, func(port int) []string { return serverArgs(dir, port) })
		if err != nil {
			shared.err = err
			return
		}
		shared.addr = p.addr
	})
	if shared.err != nil {
		t.Fatalf("redistest: shared redis-server: %v", shared.err)
	}
	return shared.addr
}

// Server returns a rueidis client (ForceSingleClient, DisableCache) to the
// Redis of [ServerAddr]. When A2REDIS_TEST_URL is set, the client options
// come from rueidis.ParseURL, keeping the URL's TLS, credentials and
// database. The client is closed at t.Cleanup.
func Server(t testing.TB) rueidis.Client {
	t.Helper()
	var opt rueidis.ClientOption
	if u := os.Getenv(EnvURL); u != "" {
		var err error
		if opt, err = rueidis.ParseURL(u); err != nil {
			t.Fatalf("redistest: parse %s: %v", EnvURL, err)
		}
	} else {
		opt.InitAddress = []string{ServerAddr(t)}
	}
	opt.ForceSingleClient = true
	opt.DisableCache = true
	return newClient(t, opt)
}

// ---------------------------------------------------------------------------
// Shared cluster.

var cluster struct {
	once  sync.Once
	addrs []string
	err   error
}

// ClusterAddrs returns the seed addresses of a 3-master Redis Cluster. If
// A2REDIS_TEST_CLUSTER (comma-separated host:port seeds) is set, those are
// returned. Otherwise a cluster of three redis-server processes is spawned
// once per test binary, joined with `redis-cli --cluster create`, and waited
// on until every node reports cluster_state:ok with all 16384 slots
// assigned; it is shared by all tests and stopped by [Main]. Without
// redis-server or redis-cli on PATH the test is skipped, or fails when
// [RequireReal]. The returned slice is the caller's to modify.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	if s := os.Getenv(EnvCluster); s != "" {
		var addrs []string
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			t.Fatalf("redistest: %s has no address", EnvCluster)
		}
		return addrs
	}
	requireBinaries(t, "redis-server", "redis-cli")
	cluster.once.Do(func() {
		dir, err := tempDir("redistest-cluster-")
		if err != nil {
			cluster.err = err
			return
		}
		procs, err := startCluster(dir)
		for _, p := range procs {
			cluster.addrs = append(cluster.addrs, p.addr)
		}
		cluster.err = err
	})
	if cluster.err != nil {
		t.Fatalf("redistest: shared cluster: %v", cluster.err)
	}
	return append([]string(nil), cluster.addrs...)
}

// startCluster starts three redis-server processes in dir, joins them into
// a 3-master cluster with `redis-cli --cluster create` and waits until every
// node reports it healthy. On error every started process is stopped.
func startCluster(dir string) ([]*process, error) {
	return startClusterWith(dir, ClusterOptions{})
}

// startClusterWith is startCluster with 3·(1+opts.ReplicasPerMaster) nodes
// (redis-cli makes the first three the masters and assigns the others as
// their replicas), opts.NodeTimeout and opts.ExtraArgs. It does not wait for
// the replicas' synchronisation.
func startClusterWith(dir string, opts ClusterOptions) (_ []*process, err error) {
	var procs []*process
	var addrs []string
	defer func() {
		if err != nil {
			for _, p := range procs {
				p.stop()
			}
		}
	}()
	var extra []string
	if opts.NodeTimeout > 0 {
		extra = append(extra, "--cluster-node-timeout", strconv.FormatInt(opts.NodeTimeout.Milliseconds(), 10))
	}
	if opts.ReplicasPerMaster > 0 {
		// No 5s wait for more replicas before a diskless sync.
		extra = append(extra, "--repl-diskless-sync-delay", "0")
	}
	extra = append(extra, opts.ExtraArgs...)
	for range 3 * (1 + opts.ReplicasPerMaster) {
		p, err := launch(opts.Bins.server(), dir, "node", freeClusterPort, func(port int) []string {
			return serverArgs(dir, port, append([]string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			}, extra...)...)
		})
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		addrs = append(addrs, p.addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.ReplicasPerMaster), "--cluster-yes")
	cmd := exec.CommandContext(ctx, opts.Bins.cli(), args...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s%s", err, out, clusterLogs(procs))
	}

	for _, p := range procs {
		for {
			info, err := respDo(p.addr, time.Second, "CLUSTER", "INFO")
			if err == nil && clusterReady(info, len(procs)) {
				break
			}
			if ctx.Err() != nil || p.exited() {
				return nil, fmt.Errorf("cluster node %s not ready within %v (last CLUSTER INFO err=%v):\n%s%s", p.addr, clusterTimeout, err, info, clusterLogs(procs))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return procs, nil
}

// clusterReady reports whether a CLUSTER INFO reply shows a healthy cluster
// of n known nodes with every slot assigned.
func clusterReady(info string, n int) bool {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields["cluster_state"] == "ok" &&
		fields["cluster_slots_assigned"] == "16384" &&
		fields["cluster_slots_ok"] == "16384" &&
		fields["cluster_known_nodes"] == strconv.Itoa(n)
}

func clusterLogs(procs []*process) string {
	var b strings.Builder
	for _, p := range procs {
		b.WriteString("\n")
		b.WriteString(logTail(p.logPath))
	}
	return b.String()
}

// Cluster returns a rueidis cluster client (InitAddress from [ClusterAddrs],
// DisableCache, ShuffleInit), closed at t.Cleanup. The test fails if the
// client does not come up in cluster mode.
func Cluster(t testing.TB) rueidis.Client {
	t.Helper()
	c := newClient(t, rueidis.ClientOption{
		InitAddress:  ClusterAddrs(t),
		DisableCache: true,
		ShuffleInit:  true,
	})
	if mode := c.Mode(); mode != rueidis.ClientModeCluster {
		t.Fatalf("redistest: cluster client is in %q mode, want %q", mode, rueidis.ClientModeCluster)
	}
	return c
}

// ---------------------------------------------------------------------------
// Private servers.

// Instance is a private redis-server started by [SpawnServer]. Its methods
// are safe for concurrent use.
type Instance struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	port int

	mu   sync.Mutex
	proc *process
}

// Addr returns the server's host:port. It stays the same across [Instance.Restart].
func (in *Instance) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port))
}

// Stop terminates the server (SIGTERM, then SIGKILL after a timeout) and
// waits for it to exit. Stopping a stopped server does nothing.
func (in *Instance) Stop() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil {
		in.proc.stop()
		in.proc = nil
	}
}

// Restart stops the server if it is running and starts it again on the same
// port with the same arguments (its data is not kept, as persistence is
// off), waiting until it answers PING. It fails the test if the server does
// not come back.
func (in *Instance) Restart() {
	in.t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil {
		in.proc.stop()
		in.proc = nil
	}
	var lastErr error
	// The port was ours a moment ago; retry briefly in case it lingers.
	for attempt := 0; attempt < startAttempts; attempt++ {
		p, err := launch(in.bin, in.dir, "redis", func() (int, error) { return in.port, nil }, in.argsFor)
		if err == nil {
			in.proc = p
			return
		}
		lastErr = err
		time.Sleep(200 * time.Millisecond)
	}
	in.t.Fatalf("redistest: restart redis-server on %s: %v", in.Addr(), lastErr)
}

func (in *Instance) argsFor(port int) []string {
	return serverArgs(in.dir, port, in.args...)
}

// SpawnServer starts a fresh, private redis-server (not shared with other
// tests) on a free loopback port, with extraArgs appended to the default
// arguments (later arguments win), and waits until it answers PING. The
// server is stopped and its directory removed at t.Cleanup (or by [Main]).
// Without redis-server on PATH the test is skipped, or fails when
// [RequireReal].
func SpawnServer(t testing.TB, extraArgs ...string) *Instance {
	t.Helper()
	requireBinaries(t, "redis-server")
	return spawnServer(t, "redis-server", extraArgs)
}

// SpawnServerFrom is [SpawnServer] with the server binary of bins (e.g.
// [Valkey]'s) instead of the redis-server on PATH.
func SpawnServerFrom(t testing.TB, bins Binaries, extraArgs ...string) *Instance {
	t.Helper()
	return spawnServer(t, bins.server(), extraArgs)
}

func spawnServer(t testing.TB, bin string, extraArgs []string) *Instance {
	t.Helper()
	dir, err := tempDir("redistest-spawn-")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	in := &Instance{t: t, bin: bin, dir: dir, args: append([]string(nil), extraArgs...)}
	p, err := launch(bin, dir, "redis", freePort, in.argsFor)
	if err != nil {
		removeDir(dir)
		t.Fatalf("redistest: spawn redis-server: %v", err)
	}
	in.proc = p
	_, portStr, _ := net.SplitHostPort(p.addr)
	in.port, _ = strconv.Atoi(portStr)
	t.Cleanup(func() {
		in.Stop()
		removeDir(dir)
	})
	return in
}

// Spawn starts a fresh, private redis-server (see [SpawnServer]) and returns
// its address and a function that stops it; the stop function is
// idempotent. The server is also stopped at t.Cleanup and by [Main]. Use
// [SpawnServer] to restart the server on the same address.
func Spawn(t testing.TB, extraArgs ...string) (addr string, stop func()) {
	t.Helper()
	in := SpawnServer(t, extraArgs...)
	return in.Addr(), in.Stop
}
