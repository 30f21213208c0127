package redistest

import (
	"testing"

	"github.com/redis/rueidis"
)

// Target is a kind of server a package's tests run against.
type Target struct {
	// Name names the subtests that run against it.
	Name string
	// Client returns a client on a server of this kind for t.
	Client func(t *testing.T) rueidis.Client
}

// Targets are the servers every behaviour test runs against: embedded
// miniredis, a spawned redis-server and a spawned 3-master Redis Cluster.
var Targets = []Target{
	{Name: "miniredis", Client: func(t *testing.T) rueidis.Client { _, c := Miniredis(t); return c }},
	{Name: "redis", Client: func(t *testing.T) rueidis.Client { return Server(t) }},
	{Name: "cluster", Client: func(t *testing.T) rueidis.Client { return Cluster(t) }},
}
