package worker

import (
	"errors"
	"fmt"
	"time"
)

// The errors of the worker runtime.
var (
	// ErrPermanent marks a handler error that retrying cannot fix: the head
	// is dead-lettered at once instead of retried (wrap an error with
	// Permanent, or return an error that matches ErrPermanent with
	// errors.Is).
	ErrPermanent = errors.New("worker: permanent failure")

	// ErrLeaseLost is the cause (context.Cause) of a handler context
	// cancelled because its claim was lost: another holder took the head
	// over, or the lease ran out before it could be renewed. Whatever the
	// handler does afterwards is not recorded; its completion would be
	// refused by the store's fence anyway.
	ErrLeaseLost = errors.New("worker: lease lost")

	// ErrShutdown is the cause (context.Cause) of a handler context
	// cancelled because the worker is stopping and the handler outran
	// Config.StopTimeout. Its claim is released without counting a failure
	// (unless the handler still returns success, which completes it).
	ErrShutdown = errors.New("worker: shutting down")

	// ErrStopDeadline is returned by Run (wrapped) when Config.StopDeadline
	// passed with handlers (or a claim call) still running: their claims
	// were left to lapse, and each is taken over (counting a failure) once
	// its lease ends.
	ErrStopDeadline = errors.New("worker: stop deadline passed with handlers or a store call still running")

	// ErrRunning is returned by Run when the worker already runs or has
	// run: a Worker runs once.
	ErrRunning = errors.New("worker: Run called twice")

	// ErrNoHandler is the failure recorded for a head of a consumer a
	// Config.AllConsumers worker has no handler for (counted and retried
	// like any failure, so a deployment that lacks the handler ends with
	// the head dead-lettered, not lost).
	ErrNoHandler = errors.New("worker: no handler")
)

// Permanent marks err as permanent: the head is dead-lettered at once (its
// failure is recorded with err's text) instead of being retried. A nil err
// gives ErrPermanent itself.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// SnoozeError asks for the head to run again after Delay without counting
// a failure: the claim is released with the head held until then (its next
// run is a new attempt). Handlers return it with Snooze.
type SnoozeError struct {
	// Delay is how long the head waits; zero or negative runs it again as
	// soon as a worker claims it.
	Delay time.Duration
}

// Snooze returns the error a handler returns to run its head again after d
// without counting a failure.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// Error implements error.
func (e *SnoozeError) Error() string { return fmt.Sprintf("worker: snoozed for %v", e.Delay) }

// PanicError is the error a handler's panic becomes: it counts as a
// failure like any other error, and its text (recorded as the head's last
// error) carries the panic value and the stack.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

// Error implements error: the value, then the stack.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack) }
