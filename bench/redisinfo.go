package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// parseInfo parses an INFO reply into its fields.
func parseInfo(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// commandStat is one command's INFO commandstats line.
type commandStat struct {
	calls, usec float64
}

// parseCommandStats parses INFO commandstats: cmdstat_<name>:calls=…,usec=…
func parseCommandStats(info string) map[string]commandStat {
	out := map[string]commandStat{}
	for k, v := range parseInfo(info) {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st commandStat
		for _, part := range strings.Split(v, ",") {
			field, value, _ := strings.Cut(part, "=")
			f, _ := strconv.ParseFloat(value, 64)
			switch field {
			case "calls":
				st.calls = f
			case "usec":
				st.usec = f
			}
		}
		out[name] = st
	}
	return out
}

// measurementCommand reports the commands the harness itself sends to
// measure, which no scenario is charged for.
func measurementCommand(name string) bool {
	return name == "info" || strings.HasPrefix(name, "config")
}

// scriptCommand reports a script invocation (the commands it runs are
// counted under their own names as well).
func scriptCommand(name string) bool {
	switch name {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
		return true
	}
	return false
}

func (h *harness) info(ctx context.Context, section string) (string, error) {
	return h.admin.Do(ctx, h.admin.B().Info().Section(section).Build()).ToString()
}

// serverCPU returns the server's used CPU (user + sys), in microseconds.
func (h *harness) serverCPU(ctx context.Context) (float64, error) {
	info, err := h.info(ctx, "cpu")
	if err != nil {
		return 0, fmt.Errorf("a2bench: INFO cpu: %w", err)
	}
	f := parseInfo(info)
	user, _ := strconv.ParseFloat(f["used_cpu_user"], 64)
	sys, _ := strconv.ParseFloat(f["used_cpu_sys"], 64)
	return (user + sys) * 1e6, nil
}

// usedMemory returns the memory the dataset holds: MEMORY STATS's
// total.allocated (INFO's used_memory) less client buffers, replication and
// AOF buffers and the script caches, which a burst of pipelined commands or
// a first script load would otherwise add as noise.
func (h *harness) usedMemory(ctx context.Context) (float64, error) {
	stats, err := h.admin.Do(ctx, h.admin.B().MemoryStats().Build()).AsMap()
	if err != nil {
		return 0, fmt.Errorf("a2bench: MEMORY STATS: %w", err)
	}
	field := func(name string) float64 {
		m, ok := stats[name]
		if !ok {
			return 0
		}
		if v, err := m.AsInt64(); err == nil {
			return float64(v)
		}
		v, _ := m.AsFloat64()
		return v
	}
	total := field("total.allocated")
	for _, noise := range []string{"clients.normal", "clients.slaves", "replication.backlog", "aof.buffer", "lua.caches", "functions.caches"} {
		total -= field(noise)
	}
	return total, nil
}

// memoryPoint reads used_memory, the dataset's share of it (as
// usedMemory) and the key count from INFO, which no scenario is charged
// for, so it can be read inside a measured phase.
func (h *harness) memoryPoint(ctx context.Context) (MemoryPoint, error) {
	info, err := h.info(ctx, "memory")
	if err != nil {
		return MemoryPoint{}, fmt.Errorf("a2bench: INFO memory: %w", err)
	}
	f := parseInfo(info)
	field := func(name string) float64 {
		v, _ := strconv.ParseFloat(f[name], 64)
		return v
	}
	p := MemoryPoint{UsedMemory: field("used_memory")}
	p.Dataset = p.UsedMemory
	for _, noise := range []string{"mem_clients_normal", "mem_clients_slaves", "mem_replication_backlog", "mem_aof_buffer", "used_memory_scripts"} {
		p.Dataset -= field(noise)
	}
	keyspace, err := h.info(ctx, "keyspace")
	if err != nil {
		return MemoryPoint{}, fmt.Errorf("a2bench: INFO keyspace: %w", err)
	}
	for _, db := range parseInfo(keyspace) {
		// db0:keys=3,expires=0,avg_ttl=0
		for _, part := range strings.Split(db, ",") {
			if v, ok := strings.CutPrefix(part, "keys="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				p.Keys += n
			}
		}
	}
	return p, nil
}

// phase is a measurement under way: it began with CONFIG RESETSTAT and
// readings of the server's and this process's CPU.
type phase struct {
	h         *harness
	serverCPU float64
	clientCPU float64
}

// begin starts measuring a phase.
func (h *harness) begin(ctx context.Context) (*phase, error) {
	if err := h.admin.Do(ctx, h.admin.B().ConfigResetstat().Build()).Error(); err != nil {
		return nil, fmt.Errorf("a2bench: CONFIG RESETSTAT: %w", err)
	}
	cpu, err := h.serverCPU(ctx)
	if err != nil {
		return nil, err
	}
	return &phase{h: h, serverCPU: cpu, clientCPU: processCPU()}, nil
}

// end finishes the phase and returns its cost per unit (units: the
// scenario's events).
func (p *phase) end(ctx context.Context, units int) (Cost, error) {
	client := processCPU() - p.clientCPU
	server, err := p.h.serverCPU(ctx)
	if err != nil {
		return Cost{}, err
	}
	server -= p.serverCPU
	stats, err := p.h.info(ctx, "commandstats")
	if err != nil {
		return Cost{}, fmt.Errorf("a2bench: INFO commandstats: %w", err)
	}
	u := float64(max(units, 1))
	c := Cost{ServerCPU: server / u, ClientCPU: client / u}
	for name, st := range parseCommandStats(stats) {
		if measurementCommand(name) || st.calls == 0 {
			continue
		}
		c.Commands += st.calls / u
		if scriptCommand(name) {
			c.Scripts += st.calls / u
		}
		c.Breakdown = append(c.Breakdown, CommandCost{Command: name, Calls: st.calls / u, Usec: st.usec / u})
	}
	sortBreakdown(c.Breakdown)
	return c, nil
}

func sortBreakdown(b []CommandCost) {
	sort.Slice(b, func(i, j int) bool {
		if b[i].Calls != b[j].Calls {
			return b[i].Calls > b[j].Calls
		}
		return b[i].Command < b[j].Command
	})
}

// cleanup empties the database between scenarios: FLUSHALL on a server of
// our own, else UNLINK of this run's keys.
func (h *harness) cleanup(ctx context.Context) error {
	c := h.admin
	if h.own {
		if err := c.Do(ctx, c.B().Flushall().Sync().Build()).Error(); err != nil {
			return fmt.Errorf("a2bench: FLUSHALL: %w", err)
		}
		return nil
	}
	for _, pattern := range []string{"a2bench-" + h.runID + "-*", "asynq:{a2bench-" + h.runID + "-*"} {
		cursor := uint64(0)
		for {
			entry, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("a2bench: SCAN: %w", err)
			}
			if len(entry.Elements) > 0 {
				if err := c.Do(ctx, c.B().Unlink().Key(entry.Elements...).Build()).Error(); err != nil {
					return fmt.Errorf("a2bench: UNLINK: %w", err)
				}
			}
			if entry.Cursor == 0 {
				break
			}
			cursor = entry.Cursor
		}
	}
	members, err := c.Do(ctx, c.B().Smembers().Key("asynq:queues").Build()).AsStrSlice()
	if err != nil && !rueidis.IsRedisNil(err) {
		return fmt.Errorf("a2bench: SMEMBERS asynq:queues: %w", err)
	}
	for _, m := range members {
		if strings.HasPrefix(m, "a2bench-"+h.runID+"-") {
			_ = c.Do(ctx, c.B().Srem().Key("asynq:queues").Member(m).Build()).Error()
		}
	}
	return nil
}

// memorySample is how many keys of each kind memoryByKind measures.
const memorySample = 300

// memoryByKind returns MEMORY USAGE per event by key kind (a session key's
// name after its hash tag, up to the next colon: log, id, heads…),
// measuring up to memorySample keys of each kind and scaling by the kind's
// key count. MEMORY USAGE leaves out the keyspace's own per-key overhead,
// which used_memory includes.
func (h *harness) memoryByKind(ctx context.Context, prefix string, events int) (map[string]float64, error) {
	c := h.admin
	counts := map[string]int{}
	samples := map[string][]string{}
	cursor := uint64(0)
	for {
		entry, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("a2bench: SCAN: %w", err)
		}
		for _, k := range entry.Elements {
			kind := "other"
			if i := strings.Index(k, "}:"); i >= 0 {
				kind, _, _ = strings.Cut(k[i+2:], ":")
			}
			counts[kind]++
			if len(samples[kind]) < memorySample {
				samples[kind] = append(samples[kind], k)
			}
		}
		if entry.Cursor == 0 {
			break
		}
		cursor = entry.Cursor
	}
	out := make(map[string]float64, len(counts))
	for kind, keys := range samples {
		cmds := make(rueidis.Commands, len(keys))
		for i, k := range keys {
			cmds[i] = c.B().MemoryUsage().Key(k).Samples(0).Build()
		}
		var sum float64
		for _, r := range c.DoMulti(ctx, cmds...) {
			n, err := r.AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				return nil, fmt.Errorf("a2bench: MEMORY USAGE: %w", err)
			}
			sum += float64(n)
		}
		out[kind] = sum / float64(len(keys)) * float64(counts[kind]) / float64(max(events, 1))
	}
	return out, nil
}
