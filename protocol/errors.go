package protocol

import (
	"errors"
	"fmt"
)

// Errors callers test for with errors.Is. ErrUnknownEnum (enums.go) and
// ErrBadID (ids.go) also occur wrapped in decode errors.
var (
	// ErrMalformed: bytes (or a value about to be encoded) break the wire
	// format or one of its limits. Every decode failure wraps it; the message
	// names the offending field, e.g. "delegation_offer.task.parts[3].data".
	ErrMalformed = errors.New("protocol: malformed")
	// ErrPeerMismatch: a signed assertion names a different peer than the
	// one that signed it.
	ErrPeerMismatch = errors.New("protocol: assertion signer is not its subject")
	// ErrExpired: a capability assertion is past its expiry.
	ErrExpired = errors.New("protocol: assertion expired")
	// ErrFrameTooLarge: a frame's declared length is above the reader's or
	// writer's cap.
	ErrFrameTooLarge = errors.New("protocol: frame too large")
	// ErrPayloadTooLarge: parts carry more content than MaxPayload, or a
	// chunked message is larger than the receiver's cap (MaxMessage).
	ErrPayloadTooLarge = errors.New("protocol: payload too large")
)

// fieldError is a validation failure at a field path. It matches ErrMalformed
// and whatever its cause matches (ErrUnknownEnum, ErrBadID), so callers can
// ask either question.
type fieldError struct {
	path string // dotted, outermost first
	err  error
}

func (e *fieldError) Error() string {
	if e.path == "" {
		return fmt.Sprintf("%v: %v", ErrMalformed, e.err)
	}
	return fmt.Sprintf("%v: %s: %v", ErrMalformed, e.path, e.err)
}

func (e *fieldError) Unwrap() []error { return []error{ErrMalformed, e.err} }

// within prefixes err's field path with name, so nested conversions report
// where in the message they failed without threading paths through every
// call. A nil err stays nil.
func within(name string, err error) error {
	if err == nil {
		return nil
	}
	if fe, ok := err.(*fieldError); ok {
		if fe.path == "" {
			return &fieldError{path: name, err: fe.err}
		}
		return &fieldError{path: name + "." + fe.path, err: fe.err}
	}
	return &fieldError{path: name, err: err}
}

// indexed names element i of a repeated field.
func indexed(name string, i int) string { return fmt.Sprintf("%s[%d]", name, i) }

// at is within for element i of a repeated field. It builds the name only
// on failure: checks run on every element of every message.
func at(name string, i int, err error) error {
	if err == nil {
		return nil
	}
	return within(indexed(name, i), err)
}

// invalid is a leaf validation failure at field name.
func invalid(name, format string, args ...any) error {
	return &fieldError{path: name, err: fmt.Errorf(format, args...)}
}

// checkLen enforces a byte-length cap on a string field.
func checkLen(name, s string, max int) error {
	if len(s) > max {
		return invalid(name, "%d bytes, limit %d", len(s), max)
	}
	return nil
}

// checkCount enforces a cap on the number of entries of a repeated field.
func checkCount(name string, n, max int) error {
	if n > max {
		return invalid(name, "%d entries, limit %d", n, max)
	}
	return nil
}
