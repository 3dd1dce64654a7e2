// Package config owns the node's configuration file, $KITH_HOME/config.toml:
// one typed Config, its defaults, strict decoding and validation, the
// commented file that "kith init" writes, and the rules that find
// $KITH_HOME itself.
//
// Precedence is flags over the file over Default(): Load decodes the file on
// top of Default(), so a key the file leaves out keeps its default, and a key
// it sets replaces the default whole (a list is replaced, never merged). The
// caller applies flags to the result and calls Validate again.
//
// Decoding is strict: a key that Config does not know is an error, reported
// with its line and, where one is close, the key that was probably meant.
// Validation does no I/O and reports every problem at once (errors.Join),
// each naming the key it is about, e.g.
//
//	config.toml:14: profiles[1].command: required when executor = "exec"
//
// Every problem is a *KeyError; errors.Is tells ErrUnknownKey, ErrSyntax and
// ErrInvalid apart.
package config

// The reference of every key, docs/config.md, comes from the types here.
//go:generate go test -run ^TestConfigReference$ -args -update-docs
