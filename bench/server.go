package bench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a redis-server the harness started: on a free loopback port,
// without persistence, in a temporary directory, in a process group of its
// own (so a terminal's Ctrl-C reaches only the harness, which then stops
// it by pid).
type Server struct {
	// Addr is the server's host:port.
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// StartServer starts redis-server (path, or the one on PATH when empty)
// and waits until it answers PING. Stop it with Stop.
func StartServer(path string) (*Server, error) {
	if path == "" {
		var err error
		if path, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("a2bench: redis-server not found on PATH (install Redis, or pass --url): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "a2bench-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s, err := startAt(path, dir, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func startAt(path, dir string, port int) (*Server, error) {
	logPath := filepath.Join(dir, "redis.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("a2bench: starting %s: %w", path, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr) == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("a2bench: redis-server exited at start:\n%s", tail(string(log), 20))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stopProcess()
			return nil, errors.New("a2bench: redis-server did not answer PING within 10s")
		}
	}
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop stops the server by its pid (SIGTERM, then SIGKILL after 5s), waits
// for it, and removes its directory. It is idempotent.
func (s *Server) Stop() {
	s.stopProcess()
	_ = os.RemoveAll(s.dir)
}

func (s *Server) stopProcess() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends one inline PING and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING replied %q", line)
	}
	return nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
