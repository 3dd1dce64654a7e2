package config

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/kithmesh/kith/protocol"
)

// The config's enums are typed values that decode themselves
// (encoding.TextUnmarshaler): a value the file spells wrong is refused by
// decoding, with the key and the allowed values, and code that reads the
// config never parses a string again.

// enum is the text form of one enum type: value i is spelled names[i].
type enum struct {
	what  string // what one value is, for messages: "level", "format", ...
	names []string
}

func (e enum) String(i uint8) string {
	if int(i) < len(e.names) {
		return e.names[i]
	}
	return fmt.Sprintf("%s(%d)", e.what, i)
}

func (e enum) marshal(i uint8) ([]byte, error) {
	if int(i) >= len(e.names) {
		return nil, fmt.Errorf("%d is not a %s; want %s", i, e.what, e.allowed())
	}
	return []byte(e.names[i]), nil
}

func (e enum) unmarshal(i *uint8, b []byte) error {
	for j, n := range e.names {
		if n == string(b) {
			*i = uint8(j)
			return nil
		}
	}
	return fmt.Errorf("%q is not a %s; want %s", b, e.what, e.allowed())
}

// allowed lists the names a file may write, for messages and the
// reference: `"debug", "info", "warn" or "error"`. An empty name (a
// default that is no value of its own) is left out.
func (e enum) allowed() string {
	var q []string
	for _, n := range e.names {
		if n != "" {
			q = append(q, fmt.Sprintf("%q", n))
		}
	}
	if len(q) < 2 {
		return strings.Join(q, "")
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// enumType is what every enum type of the config has, for the schema and
// the reference: the values a file may write.
type enumType interface{ allowed() string }

// LogLevel is the lowest level of a log: "debug", "info", "warn" or
// "error".
type LogLevel uint8

// The log levels.
const (
	LogDebug LogLevel = iota
	LogInfo
	LogWarn
	LogError
)

var logLevels = enum{"level", []string{"debug", "info", "warn", "error"}}

func (l LogLevel) String() string                { return logLevels.String(uint8(l)) }
func (l LogLevel) MarshalText() ([]byte, error)  { return logLevels.marshal(uint8(l)) }
func (l *LogLevel) UnmarshalText(b []byte) error { return logLevels.unmarshal((*uint8)(l), b) }
func (LogLevel) allowed() string                 { return logLevels.allowed() }

// Slog returns l as a slog.Level.
func (l LogLevel) Slog() slog.Level {
	switch l {
	case LogDebug:
		return slog.LevelDebug
	case LogWarn:
		return slog.LevelWarn
	case LogError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// LogFormat is how log records are written: "text" (key=value) or "json".
type LogFormat uint8

// The log formats.
const (
	LogFormatText LogFormat = iota
	LogFormatJSON
)

var logFormats = enum{"format", []string{"text", "json"}}

func (f LogFormat) String() string                { return logFormats.String(uint8(f)) }
func (f LogFormat) MarshalText() ([]byte, error)  { return logFormats.marshal(uint8(f)) }
func (f *LogFormat) UnmarshalText(b []byte) error { return logFormats.unmarshal((*uint8)(f), b) }
func (LogFormat) allowed() string                 { return logFormats.allowed() }

// PolicyMode says which peers may connect: "open" (any peer not denied)
// or "allowlist" (only peers allowed with "kith peers allow").
type PolicyMode uint8

// The policy modes.
const (
	PolicyOpen PolicyMode = iota
	PolicyAllowlist
)

var policyModes = enum{"mode", []string{"open", "allowlist"}}

func (m PolicyMode) String() string                { return policyModes.String(uint8(m)) }
func (m PolicyMode) MarshalText() ([]byte, error)  { return policyModes.marshal(uint8(m)) }
func (m *PolicyMode) UnmarshalText(b []byte) error { return policyModes.unmarshal((*uint8)(m), b) }
func (PolicyMode) allowed() string                 { return policyModes.allowed() }

// DHTMode is the private Kademlia DHT's mode: "auto", "server", "client"
// or "off".
type DHTMode uint8

// The DHT modes.
const (
	DHTAuto DHTMode = iota
	DHTServer
	DHTClient
	DHTOff
)

var dhtModes = enum{"mode", []string{"auto", "server", "client", "off"}}

func (m DHTMode) String() string                { return dhtModes.String(uint8(m)) }
func (m DHTMode) MarshalText() ([]byte, error)  { return dhtModes.marshal(uint8(m)) }
func (m *DHTMode) UnmarshalText(b []byte) error { return dhtModes.unmarshal((*uint8)(m), b) }
func (DHTMode) allowed() string                 { return dhtModes.allowed() }

// Trust is a trust level as the file writes it: "untrusted", "verified" or
// "trusted", or "" (TrustDefault) where a key's default depends on
// something else (a profile's min_trust depends on its executor).
type Trust uint8

// The trust levels of the file.
const (
	TrustDefault Trust = iota
	TrustUntrusted
	TrustVerified
	TrustTrusted
)

var trustLevels = enum{"trust level", []string{"", "untrusted", "verified", "trusted"}}

func (t Trust) String() string                { return trustLevels.String(uint8(t)) }
func (t Trust) MarshalText() ([]byte, error)  { return trustLevels.marshal(uint8(t)) }
func (t *Trust) UnmarshalText(b []byte) error { return trustLevels.unmarshal((*uint8)(t), b) }
func (Trust) allowed() string                 { return trustLevels.allowed() }

// Level returns t as the protocol's trust level; TrustDefault reads as
// untrusted, the lowest.
func (t Trust) Level() protocol.TrustLevel {
	switch t {
	case TrustVerified:
		return protocol.Verified
	case TrustTrusted:
		return protocol.Trusted
	}
	return protocol.Untrusted
}

// TrustOf returns the file's spelling of a protocol trust level.
func TrustOf(l protocol.TrustLevel) Trust {
	switch l {
	case protocol.Verified:
		return TrustVerified
	case protocol.Trusted:
		return TrustTrusted
	}
	return TrustUntrusted
}

// Executor names what runs the work behind a profile: "echo", "exec",
// "openai" or "a2a". It stays a string (its name is its value everywhere
// it travels); decoding refuses a name that is none of these.
type Executor string

// The executors a profile may name.
const (
	// ExecutorEcho returns the task as the result; for demos and tests.
	ExecutorEcho Executor = "echo"
	// ExecutorExec runs a command with the task on stdin and takes the
	// result from stdout.
	ExecutorExec Executor = "exec"
	// ExecutorOpenAI sends the task to an OpenAI-compatible chat endpoint
	// (Ollama, vLLM, llama.cpp server, ...).
	ExecutorOpenAI Executor = "openai"
	// ExecutorA2A forwards the task to an A2A agent by URL.
	ExecutorA2A Executor = "a2a"
)

// executors lists the valid executors, in the order messages name them.
var executors = enum{"executor", []string{string(ExecutorEcho), string(ExecutorExec), string(ExecutorOpenAI), string(ExecutorA2A)}}

// UnmarshalText implements encoding.TextUnmarshaler.
func (e *Executor) UnmarshalText(b []byte) error {
	var i uint8
	if err := executors.unmarshal(&i, b); err != nil {
		return fmt.Errorf("unknown executor %q; want %s", b, executors.allowed())
	}
	*e = Executor(executors.names[i])
	return nil
}

func (Executor) allowed() string { return executors.allowed() }
