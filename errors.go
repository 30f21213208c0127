package a2redis

import (
	"errors"
	"fmt"
)

// The errors a2redis returns. Every error the library returns for one of
// these conditions satisfies errors.Is with the matching value; typed errors
// (SupersededError, LayoutError, ArgumentError) carry the details.
var (
	// ErrPartialDuplicateBatch: some, but not all, of a batch's event ids are
	// already stored in the session (or a completion retry names other ids
	// than the committed one). Nothing was written.
	ErrPartialDuplicateBatch = errors.New("a2redis: batch partially duplicates stored events")

	// ErrSupersededAttempt: the attempt named as a cause no longer owns its
	// cursor's head (a newer attempt claimed it, the cursor moved past it,
	// it was dead-lettered, or the session was cleared). Nothing was written.
	ErrSupersededAttempt = errors.New("a2redis: attempt superseded")

	// ErrSessionCleared: scheduled work whose origin index lies at or below
	// the session's latest clear marker. Nothing was written.
	ErrSessionCleared = errors.New("a2redis: session cleared")

	// ErrLayoutMismatch: the key prefix holds another key layout than this
	// release writes. Point the store at a fresh prefix.
	ErrLayoutMismatch = errors.New("a2redis: key layout mismatch")

	// ErrRangeGap: a read found the log not contiguous where it must be.
	ErrRangeGap = errors.New("a2redis: gap in the event log")

	// ErrInvalidArgument: a caller argument was rejected before anything was
	// sent to Redis.
	ErrInvalidArgument = errors.New("a2redis: invalid argument")

	// ErrNoEvent: an operation named an index at which the session holds no
	// event.
	ErrNoEvent = errors.New("a2redis: no event at index")

	// ErrUnexpectedReply: Redis answered a script with a reply this release
	// does not understand (a server-side bug or a foreign script).
	ErrUnexpectedReply = errors.New("a2redis: unexpected reply")
)

// ArgumentError describes a rejected argument. It matches
// ErrInvalidArgument with errors.Is.
type ArgumentError struct {
	// Arg names the argument, e.g. "events[3].Type".
	Arg string
	// Problem says what is wrong with it.
	Problem string
}

// Error implements error.
func (e *ArgumentError) Error() string {
	return fmt.Sprintf("a2redis: invalid argument %s: %s", e.Arg, e.Problem)
}

// Is reports whether target is ErrInvalidArgument.
func (e *ArgumentError) Is(target error) bool { return target == ErrInvalidArgument }

// SupersededError reports an attempt that no longer owns its head. It
// matches ErrSupersededAttempt with errors.Is.
type SupersededError struct {
	// Session is the session id.
	Session string
	// Cause is the attempt that was superseded.
	Cause Cause
}

// Error implements error.
func (e *SupersededError) Error() string {
	return fmt.Sprintf("a2redis: attempt %d of %s at index %d in session %q is superseded",
		e.Cause.Attempt, e.Cause.cursorName(), e.Cause.Index, e.Session)
}

// Is reports whether target is ErrSupersededAttempt.
func (e *SupersededError) Is(target error) bool { return target == ErrSupersededAttempt }

// LayoutError reports a prefix that holds another key layout. It matches
// ErrLayoutMismatch with errors.Is.
type LayoutError struct {
	// Prefix is the key prefix.
	Prefix string
	// Found is the layout recorded under the prefix.
	Found string
	// Want is the layout this release writes.
	Want string
}

// Error implements error.
func (e *LayoutError) Error() string {
	if e.Found == "tagged-1" {
		return fmt.Sprintf("a2redis: key prefix %q holds layout %q, written by the a2 TypeScript package (0.22) or an early build of this module, whose keys this release reads differently (id blocks, chunk pins, compact rows, the ready index): point the store at a fresh prefix (this release writes %q)",
			e.Prefix, e.Found, e.Want)
	}
	return fmt.Sprintf("a2redis: key prefix %q holds layout %q, but this release writes %q: point the store at a fresh prefix",
		e.Prefix, e.Found, e.Want)
}

// Is reports whether target is ErrLayoutMismatch.
func (e *LayoutError) Is(target error) bool { return target == ErrLayoutMismatch }
