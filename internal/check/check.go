// Package check holds the argument rules the store and the reference model
// share: a request that breaks one is refused with a2redis.ErrInvalidArgument
// before anything is written.
package check

import (
	"unicode/utf8"

	"github.com/a2redis/a2redis"
)

// Session refuses an empty session id (any other string is fine).
func Session(session string) error {
	if session == "" {
		return a2redis.Invalid("session", "is empty")
	}
	return nil
}

// Type refuses an empty, non-UTF-8 or reserved event type.
func Type(arg, t string) error {
	switch {
	case t == "":
		return a2redis.Invalid(arg, "is empty")
	case !utf8.ValidString(t):
		return a2redis.Invalid(arg, "is not valid UTF-8")
	case t == a2redis.ClearEventType:
		return a2redis.Invalid(arg, "%q is reserved for clear markers", t)
	}
	return nil
}

// Name refuses an empty or non-UTF-8 name (consumers, holders, reducers).
func Name(arg, name string) error {
	switch {
	case name == "":
		return a2redis.Invalid(arg, "is empty")
	case !utf8.ValidString(name):
		return a2redis.Invalid(arg, "is not valid UTF-8")
	}
	return nil
}

// Lane refuses a non-UTF-8 lane (empty means no lane).
func Lane(arg, lane string) error {
	if !utf8.ValidString(lane) {
		return a2redis.Invalid(arg, "is not valid UTF-8")
	}
	return nil
}

// Cause refuses a cause without a consumer, or with an index or attempt
// below 1.
func Cause(arg string, c a2redis.Cause) error {
	if err := Name(arg+".Consumer", c.Consumer); err != nil {
		return err
	}
	if err := Lane(arg+".Lane", c.Lane); err != nil {
		return err
	}
	if c.Index < 1 {
		return a2redis.Invalid(arg+".Index", "must be at least 1 (got %d)", c.Index)
	}
	if c.Attempt < 1 {
		return a2redis.Invalid(arg+".Attempt", "must be at least 1 (got %d)", c.Attempt)
	}
	return nil
}
