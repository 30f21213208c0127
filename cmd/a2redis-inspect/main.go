package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/a2redis/a2redis/cmd/a2redis-inspect/inspect"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first Ctrl-C, a second one kills the process as usual.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return inspect.Run(ctx, args, inspect.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: os.Getenv})
}
