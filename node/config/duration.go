package config

import (
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration written in TOML as a string in Go's syntax:
// "30s", "5m", "1h30m", "250ms". A bare number is an error rather than a
// count of nanoseconds, because "timeout = 30" is never meant as 30ns.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String returns the shortest form that parses back to d: "5m", not "5m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	// time.Duration.String writes every unit below the largest one; the
	// trailing zero units are noise in a config file.
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	x, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a number with a unit, e.g. \"30s\", \"5m\", \"1h\"", b)
	}
	*d = Duration(x)
	return nil
}
