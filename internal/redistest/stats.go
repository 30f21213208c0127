package redistest

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// CommandCalls returns how many times the server ran each command since
// its last CONFIG RESETSTAT (INFO commandstats; commands run inside scripts
// are counted too), by lower-case command name.
func CommandCalls(ctx context.Context, c rueidis.Client) (map[string]int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out, nil
}
