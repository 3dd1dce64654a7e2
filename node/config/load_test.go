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
	want.LogLevel = "debug"
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
		{"in inline profile", "profiles = [{name = \"a\", executor = \"echo\", colour = \"x\"}]\n", "profiles.colour", 1, ""},
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
		path + `:1: log_level: "chatty" is not a level`,
		path + `:4: limits.max_remote_concurrent: 0; want at least 1`,
		path + `:11: profiles[1].command: required when executor = "exec"`, // the profile's header
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
	if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrInvalid) {
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
		{"int in a multi-line list", "listen = [\n  \"/ip4/0.0.0.0/tcp/4001\",\n  4001,\n]\n", "listen", 3, "wrong type"},
		{"int for table", "store = 1\n", "store", 1, "want a table [store]"},
		{"array table for table", "[[limits]]\n", "limits", 1, "want a table [limits], got a TOML array table"},
		{"bare number duration", "[limits]\ndefault_timeout = 300\n", "limits.default_timeout", 2, `invalid duration "300"`},
		{"duration without unit", "[limits]\ndefault_timeout = \"300\"\n", "limits.default_timeout", 2, `invalid duration "300"`},
		{"negative unsigned", "[[profiles]]\nname = \"a\"\nexecutor = \"echo\"\nvram_mib = -1\n", "profiles[0].vram_mib", 4, "-1 is negative"},
		{"key twice", "log_level = \"info\"\nlog_level = \"debug\"\n", "log_level", 2, "set twice"},
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

// A header the line scan cannot read leaves its keys without a line rather
// than with a wrong one.
func TestLinesUnknownWhenUnsure(t *testing.T) {
	_, err := Parse([]byte("[store]\ndurable = true\n[\"limits\"]\nmax_frame_bytes = 1\n"))
	ke := keyErrors(t, err)
	if len(ke) != 1 || ke[0].Key != "limits.max_frame_bytes" || ke[0].Line != 0 {
		t.Fatalf("want limits.max_frame_bytes without a line, got:\n%v", err)
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
		path + `:1: log_level: "chatty" is not a level`,
		path + `:2:10: listen: wrong type: want an array of strings, got a TOML string`,
		path + `:5: store.durable: wrong type: want true or false, got a TOML string`,
		path + `:8: limits.max_frame_bytes: wrong type: want an integer, got a TOML string`,
		path + `:9: limits.max_remote_concurrent: 0; want at least 1`,
		path + `:10: limits.default_timeout: `,
		path + `:16: profiles[0].vram_mib: -5 is negative; want 0 or more`,
		path + `:17: profiles[0].comand: unknown key; did you mean "command"?`,
		path + `:13: profiles[0].command: required when executor = "exec"`,
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
