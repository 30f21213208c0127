// Package workerreg is the write side of a prefix's worker registry, for
// the module's own packages: the worker runtime registers its process
// through it, and package redisstore, which holds the store's script and
// retry machinery, provides the writer (Of). Users read the registry with
// redisstore.Store.Workers, whose records are this package's Info
// (redisstore.WorkerInfo).
package workerreg

import (
	"context"
	"time"

	"github.com/a2redis/a2redis"
)

// MaxHeads is the most held heads a worker record lists (Info.Heads);
// Info.HeadsTotal counts them all.
const MaxHeads = 100

// Head is one head a worker holds.
type Head struct {
	// Session is the head's session.
	Session string `json:"session"`
	a2redis.HeadRef
}

// Info is what a running worker process tells the prefix about itself
// (Writer.Register), as the worker registry holds it
// (redisstore.Store.Workers).
type Info struct {
	// ID is the worker's id, the holder of its claims.
	ID string `json:"id"`
	// Host is the host it runs on.
	Host string `json:"host"`
	// PID is its process id.
	PID int `json:"pid"`
	// StartedAt is when it started.
	StartedAt time.Time `json:"-"`
	// Consumers are the consumers it handles.
	Consumers []string `json:"consumers"`
	// Concurrency is its handler slots.
	Concurrency int `json:"concurrency"`
	// InFlight is how many heads it held at its last heartbeat.
	InFlight int `json:"in_flight"`
	// Heads are up to MaxHeads of the heads it held.
	Heads []Head `json:"heads"`
	// HeadsTotal is how many heads it held (Heads may list fewer).
	HeadsTotal int `json:"heads_total"`
	// HeartbeatAt is when its record was last written (set by
	// Register from the store's clock).
	HeartbeatAt time.Time `json:"-"`
	// ExpiresAt is when its record expires unless refreshed (set by
	// Register: HeartbeatAt + the TTL).
	ExpiresAt time.Time `json:"-"`
}

// Writer writes one prefix's worker registry.
type Writer interface {
	// Register writes (or refreshes) a worker's record for ttl: the record
	// expires, and leaves the listing, unless it is written again before.
	// Call it every ttl/3 or so while the worker runs and Deregister when
	// it stops. One script call on the registry's slot; it also prunes a
	// bounded number of expired members from the listing. Heads beyond
	// MaxHeads are ErrInvalidArgument (HeadsTotal carries the full count).
	Register(ctx context.Context, info Info, ttl time.Duration) error
	// Deregister removes a worker's record at once (a clean stop); a
	// worker that dies without it disappears when its record expires.
	Deregister(ctx context.Context, id string) error
}

// Of returns the writer of a store's worker registry; store is a
// *redisstore.Store. Package redisstore sets it as it loads.
var Of func(store any) Writer
