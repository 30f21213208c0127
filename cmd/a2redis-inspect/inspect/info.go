package inspect

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/keys"
)

// The answers of the key-locking probe.
const (
	lockingYes     = "yes"
	lockingNo      = "no"
	lockingUnknown = "unknown"
)

func infoCommand() command {
	return command{
		name:    "info",
		summary: "show the prefix's layout, key-locking support, server kinds and versions, cluster or not",
		details: `Reads the prefix's schema key (GET; a missing one is reported, never
created), probes whether the server accepts Upstash's allow-key-locking
script flag (an EVAL of a script that only returns 1), and asks every node
for INFO server and ROLE. A prefix holding another key layout is shown and
exits 1.
JSON: {"prefix","layout"(null when none),"layout_supported","key_locking"
("yes","no","unknown"),"key_locking_detail","mode"("standalone",
"cluster"),"nodes":[{"addr","server","version","role","error"}]}.`,
		need: needClient,
		setup: func(fs *flag.FlagSet) runner {
			return runner{run: func(ctx context.Context, a *app, _ []string) error { return a.info(ctx) }}
		},
	}
}

type infoJSON struct {
	Prefix           string     `json:"prefix"`
	Layout           *string    `json:"layout"`
	LayoutSupported  bool       `json:"layout_supported"`
	KeyLocking       string     `json:"key_locking"`
	KeyLockingDetail string     `json:"key_locking_detail"`
	Mode             string     `json:"mode"`
	Nodes            []nodeJSON `json:"nodes"`
}

type nodeJSON struct {
	Addr    string `json:"addr"`
	Server  string `json:"server"`
	Version string `json:"version"`
	Role    string `json:"role"`
	Error   string `json:"error"`
}

func (a *app) info(ctx context.Context) error {
	out := infoJSON{Prefix: a.opts.prefix, Mode: string(a.client.Mode())}
	found, err := a.layout(ctx)
	if err != nil {
		return err
	}
	if found != "" {
		out.Layout = &found
		out.LayoutSupported = found == keys.Layout
	}
	out.KeyLocking, out.KeyLockingDetail = a.probeKeyLocking(ctx)
	out.Nodes = a.nodeInfo(ctx)

	if a.opts.json {
		if err := writeJSON(a.out, out); err != nil {
			return err
		}
	} else if err := a.printInfo(out, found); err != nil {
		return err
	}
	if found != "" && found != keys.Layout {
		return &a2redis.LayoutError{Prefix: a.opts.prefix, Found: found, Want: keys.Layout}
	}
	return nil
}

func (a *app) printInfo(out infoJSON, found string) error {
	layout := fmt.Sprintf("none: no a2redis data under this prefix (%s does not exist)", keys.Schema(out.Prefix))
	switch {
	case found == keys.Layout:
		layout = found + " (supported)"
	case found != "":
		layout = fmt.Sprintf("%s (NOT supported: this %s reads %s)", found, name, keys.Layout)
	}
	mode := out.Mode
	if out.Mode == string(rueidis.ClientModeCluster) {
		mode += fmt.Sprintf(" (%s)", plural(len(out.Nodes), "node", "nodes"))
	}
	kv := newTable(a.out, "")
	kv.row("prefix", out.Prefix)
	kv.row("layout", layout)
	kv.row("key locking", out.KeyLocking+": "+out.KeyLockingDetail)
	kv.row("mode", mode)
	if err := kv.close(); err != nil {
		return err
	}
	fmt.Fprintln(a.out)
	failed := false
	for _, n := range out.Nodes {
		failed = failed || n.Error != ""
	}
	header := []string{"NODE", "SERVER", "VERSION", "ROLE"}
	if failed {
		header = append(header, "ERROR")
	}
	t := newTable(a.out, "", header...)
	for _, n := range out.Nodes {
		cells := []string{n.Addr, n.Server, n.Version, n.Role}
		if failed {
			cells = append(cells, n.Error)
		}
		t.row(cells...)
	}
	return t.close()
}

// probeKeyLocking asks whether the server runs scripts carrying Upstash's
// allow-key-locking flag, with a script that writes nothing and the
// prefix's schema key as its key (so a cluster routes it to a node).
// Only the server's rejection of the flag means no.
func (a *app) probeKeyLocking(ctx context.Context) (answer, detail string) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	c := a.client
	err := c.Do(cctx, c.B().Eval().Script(scripts.KeyLockingShebang+"\nreturn 1").Numkeys(1).Key(keys.Schema(a.opts.prefix)).Build()).Error()
	switch {
	case err == nil:
		return lockingYes, "the server accepts allow-key-locking (Upstash): scripts lock only their session"
	case scripts.IsFlagRejection(err):
		return lockingNo, "the server rejects the allow-key-locking flag (Redis, Valkey): scripts run without it"
	}
	return lockingUnknown, "the probe failed: " + oneLine(err.Error())
}

// nodeInfo asks every node for its server kind, version and role.
func (a *app) nodeInfo(ctx context.Context) []nodeJSON {
	var nodes []nodeJSON
	for addr, c := range a.client.Nodes() {
		n := nodeJSON{Addr: addr}
		cctx, cancel := a.call(ctx)
		text, err := c.Do(cctx, c.B().Info().Section("server").Build()).ToString()
		cancel()
		if err != nil {
			n.Error = oneLine(a.explain(err))
		} else {
			n.Server, n.Version = serverKind(text)
		}
		if role, err := a.nodeRole(ctx, c); err == nil {
			n.Role = role
		} else if n.Error == "" {
			n.Error = "ROLE: " + oneLine(err.Error())
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Addr < nodes[j].Addr })
	return nodes
}

// serverKind reads the server's kind and version from INFO server: Valkey
// reports valkey_version (and server_name:valkey), Redis redis_version.
func serverKind(info string) (kind, version string) {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	switch {
	case fields["valkey_version"] != "":
		return "valkey", fields["valkey_version"]
	case fields["server_name"] != "":
		return fields["server_name"], fields["redis_version"]
	}
	return "redis", fields["redis_version"]
}
