// Package dockertarget starts a Redis-compatible server from a container
// image for tests, using testcontainers-go. It is a module of its own
// (github.com/a2redis/a2redis/internal/redistest/dockertarget, run by
// `make test`), with the conformance runs on Docker images, so that
// testcontainers-go and its ~50 modules stay out of the a2redis module's
// requirements and so out of what an application importing a2redis
// downloads.
//
// When no Docker engine answers (checked once per test binary, within about
// two seconds), [Start] skips the test. This holds with CI=true too: the CI
// machines of this project have no Docker engine, so unlike the real-server
// targets of package redistest, a Docker target is always optional and a
// missing engine is never a failure.
package dockertarget

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

const (
	// pingTimeout bounds the check for a Docker engine.
	pingTimeout = 2 * time.Second
	// startupTimeout bounds pulling the image and waiting for the server.
	startupTimeout = 2 * time.Minute
	redisPort      = "6379/tcp"
)

var engine struct {
	once sync.Once
	err  error // nil when a Docker engine answered
}

// dockerAvailable reports, once per test binary, whether a Docker engine
// answers within pingTimeout.
func dockerAvailable() error {
	engine.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- fmt.Errorf("docker client panicked: %v", r)
				}
			}()
			// NewDockerClientWithOpts asks the engine for its Info, so a
			// client that comes back means an engine answered.
			cli, err := testcontainers.NewDockerClientWithOpts(ctx)
			if err == nil {
				_ = cli.Close()
			}
			done <- err
		}()
		select {
		case engine.err = <-done:
		case <-time.After(pingTimeout + time.Second):
			engine.err = fmt.Errorf("no answer within %v", pingTimeout)
		}
	})
	return engine.err
}

// Start runs image (for example "redis:7-alpine" or "valkey/valkey:8") with
// port 6379 exposed, waits until the server logs that it is ready to accept
// connections, and returns its host:port. The container is terminated at
// t.Cleanup. If no Docker engine answers, the test is skipped, also with
// CI=true (see the package documentation).
func Start(t testing.TB, image string) (addr string) {
	t.Helper()
	if err := dockerAvailable(); err != nil {
		t.Skipf("dockertarget: no Docker engine answered, skipping %s target (always a skip, also with CI=true): %v", image, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startupTimeout)
	defer cancel()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts(redisPort),
		testcontainers.WithWaitStrategy(
			wait.ForLog("Ready to accept connections").WithStartupTimeout(startupTimeout),
		),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("dockertarget: start %s: %v", image, err)
	}
	addr, err = ctr.PortEndpoint(ctx, redisPort, "")
	if err != nil {
		t.Fatalf("dockertarget: endpoint of %s: %v", image, err)
	}
	return addr
}
