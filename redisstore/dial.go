package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis/internal/check"
)

// Dial connects to the server rawURL names, set up the way the store needs it
// on every target (see Connect):
//
//	redis://[user:password@]host:port[/db]   Redis, Valkey, a Cluster node, miniredis
//	rediss://…                               the same over TLS (Upstash)
//	unix:///path/to/redis.sock               a local socket
//
// Any URL rueidis.ParseURL takes works: ?addr=host:port adds a Cluster seed,
// ?dial_timeout=5s bounds connecting. Close the client when done with the
// store.
func Dial(ctx context.Context, rawURL string) (rueidis.Client, error) {
	opt, err := rueidis.ParseURL(rawURL)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // without the URL, which may hold a password
		}
		return nil, check.Invalid("url", "%v", err)
	}
	return Connect(ctx, opt)
}

// Connect opens a client with opt, adjusted for the store:
//
//   - client-side caching off (DisableCache): the store never reads through
//     the cache, and miniredis and Upstash refuse CLIENT TRACKING, which
//     rueidis would otherwise send on every connection;
//   - a Redis Cluster gets a cluster client (rueidis finds one by itself
//     from a single seed), and everything else a standalone one — including
//     miniredis, which answers CLUSTER SLOTS without being a cluster, so
//     rueidis alone would take it for one. Setting opt.ForceSingleClient
//     skips the check.
//
// rueidis dials while constructing the client, so an unreachable server or
// a wrong password fails here.
func Connect(ctx context.Context, opt rueidis.ClientOption) (rueidis.Client, error) {
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	if opt.ForceSingleClient || client.Mode() != rueidis.ClientModeCluster {
		return client, nil
	}
	cluster, err := isCluster(ctx, client)
	if err != nil {
		client.Close()
		return nil, err
	}
	if cluster {
		return client, nil
	}
	client.Close()
	opt.ForceSingleClient = true
	return rueidis.NewClient(opt)
}

// isCluster asks a server that answered CLUSTER SLOTS whether it runs as a
// cluster. A real cluster node says cluster_enabled:1 in INFO cluster;
// miniredis refuses that section. A user not allowed to run INFO (NOPERM)
// is taken at its word that it is a cluster.
func isCluster(ctx context.Context, client rueidis.Client) (bool, error) {
	info, err := client.Do(ctx, client.B().Info().Section("cluster").Build()).ToString()
	if err != nil {
		if re, ok := rueidis.IsRedisErr(err); ok {
			return strings.HasPrefix(re.Error(), "NOPERM"), nil
		}
		return false, fmt.Errorf("a2redis: asking the server whether it runs as a cluster: %w", err)
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}
