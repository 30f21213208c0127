package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/redisstore"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestRunHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, inspect.ExitOK, run(t.Context(), []string{"help"}, strings.NewReader(""), &out, &errOut))
	for _, cmd := range []string{"info", "sessions", "log", "tail", "cursors", "dead", "redrive", "presence"} {
		assert.Contains(t, out.String(), "\n  "+cmd+" ")
	}
	out.Reset()
	assert.Equal(t, inspect.ExitUsage, run(t.Context(), nil, strings.NewReader(""), &out, &errOut))
	assert.Equal(t, inspect.ExitUsage, run(t.Context(), []string{"nope"}, strings.NewReader(""), &out, &errOut))
}

// store makes a store on a fresh prefix of the shared server.
func store(t *testing.T) (*redisstore.Store, string) {
	t.Helper()
	prefix := redistest.Prefix(t)
	s, err := redisstore.New(t.Context(), redistest.Server(t), redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	return s, prefix
}

func TestRunReadsTheEnvironment(t *testing.T) {
	s, prefix := store(t)
	_, err := s.Append(t.Context(), "s", []a2redis.Event{{Type: "hello"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	t.Setenv(inspect.EnvURL, "redis://"+redistest.ServerAddr(t))
	t.Setenv(inspect.EnvPrefix, prefix)
	var out, errOut bytes.Buffer
	require.Equal(t, inspect.ExitOK, run(t.Context(), []string{"log", "s", "--json"}, strings.NewReader(""), &out, &errOut), errOut.String())
	// NDJSON: the one event on one line.
	var event struct {
		Type string `json:"type"`
	}
	require.Equal(t, 1, strings.Count(out.String(), "\n"), out.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &event))
	assert.Equal(t, "hello", event.Type)
}

// TestInterruptEndsFollow builds the binary and sends it SIGINT while it
// follows a session: a follow ends with exit code 0.
func TestInterruptEndsFollow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s, prefix := store(t)
	_, err := s.Append(t.Context(), "s", []a2redis.Event{{Type: "before"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "a2redis-inspect")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--url", "redis://"+redistest.ServerAddr(t), "--prefix", prefix, "tail", "-f", "s")
	var out syncBuffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "before") }, 20*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	_, err = s.Append(t.Context(), "s", []a2redis.Event{{Type: "during"}}, redisstore.AppendOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "during") }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, cmd.Wait(), "output: %s", out.String())
	assert.Equal(t, 0, cmd.ProcessState.ExitCode())
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
