package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
)

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	_, err := Load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	for _, want := range []string{path, "kith init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadUnreadable(t *testing.T) {
	_, err := Load(t.TempDir()) // a directory
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(directory) = %v, want a read error", err)
	}
}

func TestFileOverridesDefaults(t *testing.T) {
	c, err := Parse([]byte(`
listen = ["/ip4/127.0.0.1/tcp/0"]
log_level = "debug"

[store]
durable = false

[limits]
max_timeout = "2h"

[[profiles]]
name = "sum"
executor = "exec"
command = ["/usr/bin/sum"]
timeout = "90s"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	want.LogLevel = LogDebug
	want.Store.Durable = false
	want.Limits.MaxTimeout = Duration(2 * time.Hour)
	want.Profiles = []Profile{{Name: "sum", Executor: ExecutorExec, Command: []string{"/usr/bin/sum"}, Timeout: Duration(90 * time.Second)}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%#v\nwant\n%#v", c, want)
	}
}

func TestEmptyFileIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("Parse(nil) = %#v, want Default()", c)
	}
}

func TestEmptyListsReplaceDefaults(t *testing.T) {
	c, err := Parse([]byte("listen = []\nprofiles = []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listen) != 0 || len(c.Profiles) != 0 {
		t.Errorf("listen = %q, profiles = %+v; want both empty", c.Listen, c.Profiles)
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		wantKey  string
		wantLine int
		wantHint string
	}{
		{"top level", "log_level = \"info\"\nbogus = 1\n", "bogus", 2, ""},
		{"top level typo", "log_lvl = \"debug\"\n", "log_lvl", 1, `did you mean "log_level"?`},
		{"in store", "[store]\ndurable = true\nsync = true\n", "store.sync", 3, ""},
		{"in limits", "[limits]\nmax_frame_byte = 65536\n", "limits.max_frame_byte", 2, `did you mean "max_frame_bytes"?`},
		{"unknown table", "[limit]\nmax_timeout = \"1m\"\n", "limit", 1, `did you mean "limits"?`},
		{"in first profile", "[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\nskill = [\"x\"]\n", "profiles[0].skill", 4, `did you mean "skills"?`},
		{"in second profile", "[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\n\n[[profiles]]\nname = \"b\"\nexecutor = \"echo\"\nflavour = \"x\"\n", "profiles[1].flavour", 8, ""},
		{"in inline profile", "profiles = [{name = \"a\", executor = \"echo\", colour = \"x\"}]\n", "profiles[0].colour", 1, ""},
		{"top-level key under a table", "[store]\nlog_level = \"debug\"\n", "store.log_level", 2, "log_level is a top-level key: move it above the first [table]"},
		{"table key at top level", "durable = false\n", "durable", 1, "durable belongs in [store]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.doc)
			_, err := Load(path)
			if !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("Load = %v, want ErrUnknownKey", err)
			}
			ke := keyErrors(t, err)
			if len(ke) != 1 {
				t.Fatalf("want one problem, got:\n%v", err)
			}
			e := ke[0]
			if e.Key != tt.wantKey || e.Line != tt.wantLine || e.File != path {
				t.Errorf("got key %q line %d file %q, want %q line %d file %q", e.Key, e.Line, e.File, tt.wantKey, tt.wantLine, path)
			}
			if !strings.Contains(e.Msg, tt.wantHint) {
				t.Errorf("message %q does not contain %q", e.Msg, tt.wantHint)
			}
			// The message names the file, line and key, as a compiler would.
			prefix := path + ":" + strconv.Itoa(tt.wantLine) + ":"
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.wantKey+": unknown key") {
				t.Errorf("error %q should start with %q and name %q", err, prefix, tt.wantKey)
			}
		})
	}
}

// Unknown keys do not hide the other problems: everything is reported in
// one go, each with its line.
func TestLoadReportsEverythingWithLines(t *testing.T) {
	path := writeConfig(t, `log_level = "chatty"

[limits]
max_remote_concurrent = 0
default_hop_limit = 4

[[profiles]]
name = "echo"
executor = "echo"

[[profiles]]
name = "run"
executor = "exec"
comand = ["/bin/cat"]
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load succeeded")
	}
	want := []string{
		path + `:14:1: profiles[1].comand: unknown key; did you mean "command"?`,
		path + `:1:13: log_level: "chatty" is not a level; want "debug", "info", "warn" or "error"`,
		path + `:4:25: limits.max_remote_concurrent: 0; want at least 1`,
		path + `:11:3: profiles[1].command: required when executor = "exec"`, // the profile's header
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("no problem reads %q in:\n%v", w, err)
		}
	}
	if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrSyntax) {
		t.Error("the joined error should be both ErrUnknownKey and ErrInvalid")
	}
}

func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		wantKey  string
		wantLine int
		wantMsg  string
	}{
		{"unterminated array", "listen = [\n", "listen", 1, "array is incomplete"},
		{"not toml", "this is not toml\n", "", 1, ""},
		{"string for int", "[limits]\nmax_frame_bytes = \"4MiB\"\n", "limits.max_frame_bytes", 2, "wrong type: want an integer, got a TOML string"},
		{"string for bool", "[store]\ndurable = \"yes\"\n", "store.durable", 2, "wrong type: want true or false, got a TOML string"},
		{"string for list", "listen = \"/ip4/0.0.0.0/tcp/4001\"\n", "listen", 1, "wrong type: want an array of strings"},
		{"int in a multi-line list", "listen = [\n  \"/ip4/0.0.0.0/tcp/4001\",\n  4001,\n]\n", "listen[1]", 3, "wrong type: want a string, got a TOML integer"},
		{"int for table", "store = 1\n", "store", 1, "want a table [store]"},
		{"array table for table", "[[limits]]\n", "limits", 1, "want a table [limits], got a TOML array of tables"},
		{"bare number duration", "[limits]\ndefault_timeout = 300\n", "limits.default_timeout", 2, `wrong type: want a duration string such as "30s", got a TOML integer`},
		{"int for enum", "log_level = 3\n", "log_level", 1, `wrong type: want one of "debug", "info", "warn" or "error", got a TOML integer`},
		{"key twice", "log_level = \"info\"\nlog_level = \"debug\"\n", "log_level", 2, "set twice"},
		{"key twice in a profile", "[[profiles]]\nname = \"a\"\n[[profiles]]\nname = \"b\"\nname = \"c\"\n", "profiles[1].name", 5, "set twice"},
		{"broken value in a table", "[limits]\nmax_frame_bytes = \n", "limits.max_frame_bytes", 2, ""},
		{"table twice", "[store]\n[limits]\n[store]\n", "store", 3, "set twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse = %v, want ErrSyntax", err)
			}
			ke := keyErrors(t, err)
			if len(ke) != 1 {
				t.Fatalf("want one problem, got:\n%v", err)
			}
			e := ke[0]
			if e.Key != tt.wantKey || e.Line != tt.wantLine {
				t.Errorf("got key %q line %d, want %q line %d (%v)", e.Key, e.Line, tt.wantKey, tt.wantLine, e)
			}
			if !strings.Contains(e.Msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", e.Msg, tt.wantMsg)
			}
		})
	}
}

// A multi-line string whose text looks like keys must not confuse the
// line numbers.
func TestLinesSkipMultilineStrings(t *testing.T) {
	_, err := Parse([]byte(`[[profiles]]
name = "chat"
executor = "openai"
system = """
url = "not a key"
model = "not a key either"
"""
`))
	ke := keyErrors(t, err)
	if len(ke) != 2 {
		t.Fatalf("want two problems (url, model), got:\n%v", err)
	}
	for _, e := range ke {
		if e.Line != 1 {
			t.Errorf("%v: line %d, want 1 (the profile's header)", e, e.Line)
		}
	}
}

// Positions come from go-toml's own parser, so every way TOML has of
// writing a key is placed: quoted headers and keys, dotted keys, inline
// tables and arrays of them.
func TestPositionsOfEveryKeyForm(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		key  string
		line int
		col  int
	}{
		{"quoted header", "[store]\ndurable = true\n[\"limits\"]\nmax_frame_bytes = 1\n", "limits.max_frame_bytes", 4, 19},
		{"quoted key", "[limits]\n\"max_frame_bytes\" = 1\n", "limits.max_frame_bytes", 2, 21},
		{"dotted key", "log_level = \"info\"\nlimits.max_frame_bytes = 1\n", "limits.max_frame_bytes", 2, 26},
		{"inline table", "limits = { max_frame_bytes = 1 }\n", "limits.max_frame_bytes", 1, 30},
		{"second inline profile", "profiles = [\n  {name = \"a\", executor = \"echo\"},\n  {name = \"b\", executor = \"exec\"},\n]\n", "profiles[1].command", 3, 3},
		{"enum in a profile", "[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\nmin_trust = \"friends\"\n", "profiles[0].min_trust", 4, 13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			ke := keyErrors(t, err)
			if len(ke) != 1 || ke[0].Key != tt.key || ke[0].Line != tt.line || ke[0].Column != tt.col {
				t.Fatalf("want one problem with %s at %d:%d, got:\n%v", tt.key, tt.line, tt.col, err)
			}
		})
	}
}

// The enums decode themselves: a misspelt value is refused while decoding,
// at its position, with the allowed values, together with every other
// problem, and never reaches the code that reads the config.
func TestEnumsRefusedWhileDecoding(t *testing.T) {
	tests := []struct{ doc, key, msg string }{
		{"log_level = \"chatty\"\n", "log_level", `"chatty" is not a level; want "debug", "info", "warn" or "error"`},
		{"log_format = \"xml\"\n", "log_format", `"xml" is not a format; want "text" or "json"`},
		{"[store]\ndb_log_level = \"DEBUG\"\n", "store.db_log_level", `"DEBUG" is not a level`},
		{"[policy]\nmode = \"closed\"\n", "policy.mode", `"closed" is not a mode; want "open" or "allowlist"`},
		{"[policy]\nquery_trust = \"friends\"\n", "policy.query_trust", `"friends" is not a trust level; want "untrusted", "verified" or "trusted"`},
		{"[policy]\nquery_trust = \"\"\n", "policy.query_trust", `""; want "untrusted", "verified" or "trusted"`},
		{"[discovery]\ndht = \"on\"\n", "discovery.dht", `"on" is not a mode; want "auto", "server", "client" or "off"`},
		{"[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\nmin_trust = \"admin\"\n", "profiles[0].min_trust", `"admin" is not a trust level`},
		{"[[profiles]]\nname = \"a\"\nexecutor = \"shell\"\n", "profiles[0].executor", `unknown executor "shell"; want "echo", "exec", "openai" or "a2a"`},
		{"[limits]\ndefault_timeout = \"300\"\n", "limits.default_timeout", `invalid duration "300"`},
		{"[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\nvram_mib = -1\n", "profiles[0].vram_mib", "-1 is negative; want 0 or more"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			_, err := Parse([]byte("bogus = 1\n" + tt.doc))
			ke := keyErrors(t, err)
			if len(ke) != 2 {
				t.Fatalf("want the value and the unknown key, got:\n%v", err)
			}
			e := ke[0]
			if e.Key == "bogus" {
				e = ke[1]
			}
			if e.Key != tt.key || !strings.HasPrefix(e.Msg, tt.msg) || e.Line == 0 || e.Column == 0 || !errors.Is(e, ErrInvalid) {
				t.Errorf("got %v (%v), want %s: %s, with a position, ErrInvalid", e, e.Err, tt.key, tt.msg)
			}
		})
	}
	// An empty min_trust is the executor's default, as the default file
	// documents it.
	c, err := Parse([]byte("[[profiles]]\nname = \"a\"\nexecutor = \"exec\"\ncommand = [\"/bin/cat\"]\nmin_trust = \"\"\n"))
	if err != nil || c.Profiles[0].Trust() != protocol.Verified {
		t.Errorf("min_trust = \"\": %v, trust %v; want the exec default, verified", err, c.Profiles[0].Trust())
	}
}

func TestKeyErrorFormat(t *testing.T) {
	tests := []struct {
		e    KeyError
		want string
	}{
		{KeyError{Key: "log_level", Msg: "bad"}, "log_level: bad"},
		{KeyError{Line: 3, Key: "log_level", Msg: "bad"}, "line 3: log_level: bad"},
		{KeyError{File: "c.toml", Key: "log_level", Msg: "bad"}, "c.toml: log_level: bad"},
		{KeyError{File: "c.toml", Line: 3, Key: "log_level", Msg: "bad"}, "c.toml:3: log_level: bad"},
		{KeyError{File: "c.toml", Line: 3, Column: 7, Msg: "bad"}, "c.toml:3:7: bad"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

// Whatever the bytes, Parse does not panic, and a config it accepts
// validates.
func FuzzParse(f *testing.F) {
	f.Add(DefaultFile(nil))
	f.Add([]byte("[[profiles]]\nname = \"x\"\nexecutor = \"exec\"\ncommand = [\"/bin/cat\"]\nenv = [\"A=1\"]\n"))
	f.Add([]byte("[limits]\ndefault_timeout = \"1h30m\"\nmax_timeout = \"2h\"\n"))
	f.Add([]byte("system = '''\nx = 1\n'''\n[store]\n[[profiles]]\n"))
	// Every way TOML writes a key, for the position index.
	f.Add([]byte("[\"limits\"]\n\"max_frame_bytes\" = 1\nlimits.x.y = [1, {a = 2}]\nprofiles = [{name = \"a\", executor = \"shell\", min_trust = 3}]\n"))
	f.Add([]byte("[[profiles]]\nname = \"a\"\n[profiles.sub]\nk = true\n[[profiles]]\nname = \"a\"\nname = \"b\"\nlog_level = [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			keyErrors(t, err) // every problem is a *KeyError
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
	})
}

// A value of the wrong type hides nothing: go-toml stops at the first one,
// and the lenient second pass reports it with every other wrong type,
// unknown key and broken rule, each on its line.
func TestLoadReportsTypeErrorsWithEverythingElse(t *testing.T) {
	path := writeConfig(t, `log_level = "chatty"
listen = "/ip4/0.0.0.0/tcp/4001"

[store]
durable = "yes"

[limits]
max_frame_bytes = "4MiB"
max_remote_concurrent = 0
default_timeout = 300
offers_per_second = 2.5

[[profiles]]
name = "gpu"
executor = "exec"
vram_mib = -5
comand = ["/bin/cat"]
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load succeeded")
	}
	want := []string{
		path + `:1:13: log_level: "chatty" is not a level`,
		path + `:2:10: listen: wrong type: want an array of strings, got a TOML string`,
		path + `:5:11: store.durable: wrong type: want true or false, got a TOML string`,
		path + `:8:19: limits.max_frame_bytes: wrong type: want an integer, got a TOML string`,
		path + `:9:25: limits.max_remote_concurrent: 0; want at least 1`,
		path + `:10:19: limits.default_timeout: wrong type`,
		path + `:16:12: profiles[0].vram_mib: -5 is negative; want 0 or more`,
		path + `:17:1: profiles[0].comand: unknown key; did you mean "command"?`,
		path + `:13:3: profiles[0].command: required when executor = "exec"`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, w)
		}
		if !found {
			t.Errorf("no problem reads %q in:\n%v", w, err)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for _, kind := range []error{ErrSyntax, ErrUnknownKey, ErrInvalid} {
		if !errors.Is(err, kind) {
			t.Errorf("the joined error is not %v", kind)
		}
	}
}

// Each wrong type alone is still reported alone, with go-toml's position
// where it has one (TestSyntaxErrors); a real syntax error still hides
// everything, since nothing after it can be read.
func TestSyntaxErrorStillComesAlone(t *testing.T) {
	_, err := Parse([]byte("log_level = \"chatty\"\n[limits]\nmax_frame_bytes = \n"))
	ke := keyErrors(t, err)
	if len(ke) != 1 || !errors.Is(err, ErrSyntax) {
		t.Fatalf("want one syntax error, got:\n%v", err)
	}
}
