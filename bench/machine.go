package bench

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Machine describes where a run ran.
type Machine struct {
	// NProc is the number of CPUs Go sees (nproc).
	NProc int `json:"nproc"`
	// CPUModel is /proc/cpuinfo's first "model name".
	CPUModel string `json:"cpu_model"`
	// OS and Arch are GOOS and GOARCH.
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// GoVersion is the toolchain that built the harness.
	GoVersion string `json:"go_version"`
	// RedisVersion is INFO server's redis_version.
	RedisVersion string `json:"redis_version"`
	// Server says which server was used.
	Server string `json:"server"`
	// Modules are the versions of the compared libraries.
	Modules map[string]string `json:"modules"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// load averages when the run started and ended.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

func describeMachine(ctx context.Context, h *harness) Machine {
	m := Machine{
		NProc: runtime.NumCPU(), CPUModel: cpuModel(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		GoVersion: runtime.Version(), LoadAvgStart: loadAvg(), Modules: map[string]string{},
	}
	if info, err := h.info(ctx, "server"); err == nil {
		m.RedisVersion = parseInfo(info)["redis_version"]
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/rueidis", "github.com/hibiken/asynq", "github.com/redis/go-redis/v9":
				m.Modules[d.Path] = d.Version
			}
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// redactURL drops a URL's password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
