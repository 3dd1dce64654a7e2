package config

import (
	"errors"
	"fmt"
	"strings"
)

// The kinds of problem a *KeyError reports; test with errors.Is.
var (
	// ErrUnknownKey: the file sets a key that Config does not have.
	ErrUnknownKey = errors.New("unknown key")
	// ErrSyntax: the file is not valid TOML, or a value has the wrong type.
	// A syntax error stops decoding, so it comes alone; a value of the
	// wrong type is reported with every other problem.
	ErrSyntax = errors.New("invalid TOML")
	// ErrInvalid: a value breaks one of Validate's rules.
	ErrInvalid = errors.New("invalid value")
)

// KeyError is one problem with a configuration, tied to the key it is
// about. Validate, Parse and Load return every problem they find joined
// with errors.Join; each line of the joined message is one KeyError.
type KeyError struct {
	File   string // the file, when Load read it
	Line   int    // 1-based line in the file; 0 when unknown
	Column int    // 1-based column; 0 when unknown
	// Key is the TOML key, with array indexes: "log_level",
	// "limits.max_frame_bytes", "profiles[1].command", "listen[0]". Empty
	// for a syntax error that is about no key.
	Key string
	Msg string // what is wrong, and what would be right
	Err error  // ErrUnknownKey, ErrSyntax or ErrInvalid
}

// Error formats the problem the way compilers do, so editors can jump to
// it: "config.toml:14: profiles[1].command: required when executor = "exec"".
func (e *KeyError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "":
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
			if e.Column > 0 {
				fmt.Fprintf(&b, ":%d", e.Column)
			}
		}
		b.WriteString(": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the kind of problem.
func (e *KeyError) Unwrap() error { return e.Err }

// problems collects validation problems in the order they are found.
type problems []*KeyError

func (ps *problems) add(key, format string, args ...any) {
	*ps = append(*ps, &KeyError{Key: key, Msg: fmt.Sprintf(format, args...), Err: ErrInvalid})
}

// join returns the problems as one error, nil when there are none.
func join[E error](errs []E) error {
	if len(errs) == 0 {
		return nil
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
