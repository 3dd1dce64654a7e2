package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
)

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestDefaultValues(t *testing.T) {
	d := Default()
	want := map[string]any{
		"listen":                        []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"},
		"peers":                         []string(nil),
		"api_socket":                    "",
		"log_level":                     LogInfo,
		"store.durable":                 true,
		"store.path":                    "",
		"limits.max_frame_bytes":        4 << 20,
		"limits.stream_idle_timeout":    Duration(30 * time.Second),
		"limits.max_remote_concurrent":  4,
		"limits.untrusted_remote_slots": 1,
		"limits.default_timeout":        Duration(5 * time.Minute),
		"limits.max_timeout":            Duration(time.Hour),
		"limits.default_hop_limit":      4,
		"limits.envelope_max_skew":      Duration(30 * time.Second),
	}
	got := map[string]any{
		"listen":                        d.Listen,
		"peers":                         d.Peers,
		"api_socket":                    d.APISocket,
		"log_level":                     d.LogLevel,
		"store.durable":                 d.Store.Durable,
		"store.path":                    d.Store.Path,
		"limits.max_frame_bytes":        d.Limits.MaxFrameBytes,
		"limits.stream_idle_timeout":    d.Limits.StreamIdleTimeout,
		"limits.max_remote_concurrent":  d.Limits.MaxRemoteConcurrent,
		"limits.untrusted_remote_slots": d.Limits.UntrustedRemoteSlots,
		"limits.default_timeout":        d.Limits.DefaultTimeout,
		"limits.max_timeout":            d.Limits.MaxTimeout,
		"limits.default_hop_limit":      d.Limits.DefaultHopLimit,
		"limits.envelope_max_skew":      d.Limits.EnvelopeMaxSkew,
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s = %#v, want %#v", k, got[k], w)
		}
	}
	wantEcho := []Profile{{Name: "echo", Description: "Echoes the task back; for demos and tests", Executor: ExecutorEcho}}
	if !reflect.DeepEqual(d.Profiles, wantEcho) {
		t.Errorf("profiles = %#v, want %#v", d.Profiles, wantEcho)
	}
}

func TestDefaultReturnsFreshSlices(t *testing.T) {
	a := Default()
	a.Listen[0] = "changed"
	a.Profiles[0].Name = "changed"
	b := Default()
	if b.Listen[0] == "changed" || b.Profiles[0].Name == "changed" {
		t.Fatal("Default() shares slices between calls")
	}
}

func TestPaths(t *testing.T) {
	home := "/srv/kith"
	tests := []struct {
		socket, store        string
		wantSocket, wantData string
	}{
		{"", "", "/srv/kith/kith.sock", "/srv/kith/data"},
		{"/run/kith/api.sock", "/var/lib/kith", "/run/kith/api.sock", "/var/lib/kith"},
		{"sock/api.sock", "db", "/srv/kith/sock/api.sock", "/srv/kith/db"},
		{"/run//kith/./api.sock", "/var/lib/kith/", "/run/kith/api.sock", "/var/lib/kith"},
	}
	for _, tt := range tests {
		c := Default()
		c.APISocket, c.Store.Path = tt.socket, tt.store
		if got := c.SocketPath(home); got != tt.wantSocket {
			t.Errorf("SocketPath with api_socket %q = %q, want %q", tt.socket, got, tt.wantSocket)
		}
		if got := c.StorePath(home); got != tt.wantData {
			t.Errorf("StorePath with store.path %q = %q, want %q", tt.store, got, tt.wantData)
		}
	}
}

func TestProfileEffectiveValues(t *testing.T) {
	l := Default().Limits
	tests := []struct {
		p           Profile
		wantBudget  uint64
		wantTimeout time.Duration
	}{
		{Profile{}, DefaultMaxBudgetTokens, 5 * time.Minute},
		{Profile{MaxBudgetTokens: 100, Timeout: Duration(time.Minute)}, 100, time.Minute},
		{Profile{Timeout: Duration(2 * time.Hour)}, DefaultMaxBudgetTokens, time.Hour}, // capped
	}
	for _, tt := range tests {
		if got := tt.p.EffectiveMaxBudgetTokens(); got != tt.wantBudget {
			t.Errorf("%+v: EffectiveMaxBudgetTokens = %d, want %d", tt.p, got, tt.wantBudget)
		}
		if got := tt.p.EffectiveTimeout(l); got != tt.wantTimeout {
			t.Errorf("%+v: EffectiveTimeout = %s, want %s", tt.p, got, tt.wantTimeout)
		}
	}
}

func TestLookupsAndLevels(t *testing.T) {
	c := Default()
	if p, ok := c.Profile("echo"); !ok || p.Executor != ExecutorEcho {
		t.Errorf("Profile(echo) = %+v, %v", p, ok)
	}
	if _, ok := c.Profile("nope"); ok {
		t.Error("Profile(nope) found something")
	}
	for level, want := range map[string]string{"debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR"} {
		if err := c.LogLevel.UnmarshalText([]byte(level)); err != nil {
			t.Fatal(err)
		}
		if got := c.LogLevel.Slog().String(); got != want {
			t.Errorf("Slog() for %q = %s, want %s", level, got, want)
		}
	}
}

func TestDefaultFileRoundTrips(t *testing.T) {
	for _, listen := range [][]string{
		nil,
		{"/ip4/127.0.0.1/tcp/0"},
		{"/ip4/0.0.0.0/tcp/5001", "/ip6/::/tcp/5001", "/ip4/0.0.0.0/udp/5001/quic-v1"},
	} {
		want := Default()
		if len(listen) > 0 {
			want.Listen = listen
		}
		path := filepath.Join(t.TempDir(), FileName)
		if err := os.WriteFile(path, DefaultFile(listen), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatalf("Load(DefaultFile(%q)): %v", listen, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Load(DefaultFile(%q)) =\n%#v\nwant\n%#v", listen, got, want)
		}
	}
}

// Every key of the schema appears in the default file, set or commented
// out, so a new field cannot be added without documenting it there.
func TestDefaultFileShowsEveryKey(t *testing.T) {
	file := string(DefaultFile(nil))
	for key, k := range schema {
		if _, isTable := map[string]bool{"store": true, "limits": true, "policy": true, "contexts": true, "gpu": true, "discovery": true, "nat": true, "api": true, "profiles": true}[key]; isTable {
			if !strings.Contains(file, "["+key+"]") {
				t.Errorf("default file has no [%s] header", key)
			}
			continue
		}
		re := regexp.MustCompile(`(?m)^#?(?:   )?` + regexp.QuoteMeta(k.leaf) + ` = `)
		if !re.MatchString(file) {
			t.Errorf("default file does not show %s", key)
		}
	}
}

// Uncommenting a default ("#key = value") must change nothing: the values
// shown are the real defaults.
func TestDefaultFileShowsTrueDefaults(t *testing.T) {
	uncommented := regexp.MustCompile(`(?m)^#(\w+ = )`).ReplaceAll(DefaultFile(nil), []byte("$1"))
	if string(uncommented) == string(DefaultFile(nil)) {
		t.Fatal("found no commented-out defaults")
	}
	got, err := Parse(uncommented)
	if err != nil {
		t.Fatalf("default file with every default uncommented: %v\n%s", err, uncommented)
	}
	want := Default()
	want.Peers = []string{}
	want.Discovery.DNSSDDomains = []string{}
	want.NAT.Relays = []string{}
	want.Profiles[0].Skills = []string{}
	want.Profiles[0].MaxBudgetTokens = DefaultMaxBudgetTokens // shown as its effective value
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got, want)
	}
}

// The commented example profiles are valid as written.
func TestDefaultFileExamplesAreValid(t *testing.T) {
	uncommented := regexp.MustCompile(`(?m)^#   `).ReplaceAll(DefaultFile(nil), nil)
	c, err := Parse(uncommented)
	if err != nil {
		t.Fatalf("default file with the examples uncommented: %v\n%s", err, uncommented)
	}
	var names []string
	for _, p := range c.Profiles {
		names = append(names, p.Name+":"+string(p.Executor))
	}
	if got, want := strings.Join(names, " "), "echo:echo summarize:exec llama:openai researcher:a2a"; got != want {
		t.Errorf("profiles = %s, want %s", got, want)
	}
}

func TestTOMLString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "tab\tnl\ncr\r", "bell\a\x00\x7f", "ünïcode ✓"} {
		doc := "[[profiles]]\nname = \"x\"\nexecutor = \"echo\"\ndescription = " + tomlString(s)
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		if got := c.Profiles[0].Description; got != s {
			t.Errorf("tomlString(%q) decodes to %q", s, got)
		}
	}
}

// Every field of the config types says its default (or that it is
// required, or which table it is) in its doc comment.
func TestFieldsDocumentDefaults(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{"Config": true, "Store": true, "Limits": true, "Profile": true}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			ts, ok := spec.(*ast.TypeSpec)
			if !ok || !types[ts.Name.Name] {
				continue
			}
			delete(types, ts.Name.Name)
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				doc := field.Doc.Text()
				if !strings.Contains(doc, "Default:") && !strings.Contains(doc, "Required") && !strings.Contains(doc, "([") {
					t.Errorf("%s.%s: doc comment does not state its default: %q", ts.Name.Name, field.Names[0].Name, doc)
				}
			}
		}
	}
	for name := range types {
		t.Errorf("type %s not found in config.go", name)
	}
}

// Every executor but echo spends real resources, so by default only
// verified peers may use its profiles; an explicit min_trust wins.
func TestProfileTrustDefaults(t *testing.T) {
	for _, tt := range []struct {
		p    Profile
		want protocol.TrustLevel
	}{
		{Profile{Executor: ExecutorEcho}, protocol.Untrusted},
		{Profile{Executor: ExecutorExec}, protocol.Verified},
		{Profile{Executor: ExecutorOpenAI}, protocol.Verified},
		{Profile{Executor: "a2a"}, protocol.Verified}, // any executor added later
		{Profile{Executor: ExecutorExec, MinTrust: TrustUntrusted}, protocol.Untrusted},
		{Profile{Executor: ExecutorEcho, MinTrust: TrustTrusted}, protocol.Trusted},
	} {
		if got := tt.p.Trust(); got != tt.want {
			t.Errorf("executor %q min_trust %q: Trust() = %v, want %v", tt.p.Executor, tt.p.MinTrust, got, tt.want)
		}
	}
	// The file kith init writes keeps that default.
	c, err := Parse(append(DefaultFile(nil), "\n[[profiles]]\nname = \"up\"\nexecutor = \"exec\"\ncommand = [\"tr\"]\n"...))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Profile("up"); p.Trust() != protocol.Verified {
		t.Errorf("an exec profile added to the default file: Trust() = %v, want verified", p.Trust())
	}
	if p, _ := c.Profile("echo"); p.Trust() != protocol.Untrusted {
		t.Errorf("the default echo profile: Trust() = %v, want untrusted", p.Trust())
	}
}
