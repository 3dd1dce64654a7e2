package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// keyErrors returns the *KeyErrors joined in err.
func keyErrors(t *testing.T, err error) []*KeyError {
	t.Helper()
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var out []*KeyError
	for _, e := range errs {
		var ke *KeyError
		if !errors.As(e, &ke) {
			t.Fatalf("%v (%T) is not a *KeyError", e, e)
		}
		out = append(out, ke)
	}
	return out
}

func execProfile(name string) Profile {
	return Profile{Name: name, Executor: ExecutorExec, Command: []string{"/bin/cat"}}
}

func openAIProfile(name string) Profile {
	return Profile{Name: name, Executor: ExecutorOpenAI, URL: "http://127.0.0.1:11434/v1", Model: "llama3.1:8b"}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.LogLevel = 7
	c.Listen = append(c.Listen, "not-a-multiaddr")
	c.Limits.MaxFrameBytes = 1024
	c.Limits.DefaultHopLimit = 0
	c.Profiles = append(c.Profiles,
		Profile{Name: "run", Executor: ExecutorExec}, // no command
		Profile{Name: "echo", Executor: ExecutorEcho, Command: []string{"/bin/true"}},
	)
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	want := []string{
		`listen[2]: "not-a-multiaddr" is not a multiaddr`,
		`log_level: 7 is not a level`,
		`limits.max_frame_bytes: 1024 is out of range`,
		`limits.default_hop_limit: 0 is out of range`,
		`profiles[1].command: required when executor = "exec"`,
		`profiles[2].command: only for executor = "exec"; this profile's executor is "echo"`,
		`profiles[2].name: "echo" is already the name of profiles[0]`,
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
	ke := keyErrors(t, err)
	if len(ke) != len(want) {
		t.Errorf("%d problems, want %d:\n%v", len(ke), len(want), err)
	}
	for _, e := range ke {
		if !errors.Is(e, ErrInvalid) {
			t.Errorf("%v is not ErrInvalid", e)
		}
	}
	if !errors.Is(err, ErrInvalid) {
		t.Error("joined error is not ErrInvalid")
	}
}

func TestValidateRules(t *testing.T) {
	id := testPeerID(t)
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantKey string // "" for a valid config
		wantMsg string
	}{
		// Top level.
		{"listen empty", func(c *Config) { c.Listen = nil }, "", ""},
		{"listen ipv6 and quic", func(c *Config) { c.Listen = []string{"/ip6/::/tcp/4001", "/ip6/::/udp/4001/quic-v1"} }, "", ""},
		{"listen garbage", func(c *Config) { c.Listen = []string{"0.0.0.0:4001"} }, "listen[0]", "is not a multiaddr"},
		{"listen duplicate", func(c *Config) { c.Listen = []string{"/ip4/0.0.0.0/tcp/1", "/ip4/0.0.0.0/tcp/1"} }, "listen[1]", "repeats listen[0]"},
		{"peer ok", func(c *Config) { c.Peers = []string{"/ip4/192.168.1.20/tcp/4001/p2p/" + id.String()} }, "", ""},
		{"peer dns ok", func(c *Config) { c.Peers = []string{"/dns4/nas.lan/udp/4001/quic-v1/p2p/" + id.String()} }, "", ""},
		{"peer not multiaddr", func(c *Config) { c.Peers = []string{"nas.lan:4001"} }, "peers[0]", "is not a multiaddr"},
		{"peer without id", func(c *Config) { c.Peers = []string{"/ip4/192.168.1.20/tcp/4001"} }, "peers[0]", "must end in /p2p/<peer id>"},
		{"peer bad id", func(c *Config) { c.Peers = []string{"/ip4/192.168.1.20/tcp/4001/p2p/QmNotAPeer"} }, "peers[0]", ""},
		{"peer without address", func(c *Config) { c.Peers = []string{"/p2p/" + id.String()} }, "peers[0]", "has no address to dial"},
		{"log level debug", func(c *Config) { c.LogLevel = LogDebug }, "", ""},
		{"log level out of range", func(c *Config) { c.LogLevel = 9 }, "log_level", `9 is not a level; want "debug", "info", "warn" or "error"`},
		{"log format out of range", func(c *Config) { c.LogFormat = 2 }, "log_format", "is not a format"},
		{"db log level out of range", func(c *Config) { c.Store.DBLogLevel = 4 }, "store.db_log_level", "is not a level"},
		{"dht out of range", func(c *Config) { c.Discovery.DHT = 4 }, "discovery.dht", `want "auto", "server", "client" or "off"`},

		// Policy and per-peer limits.
		{"policy allowlist", func(c *Config) { c.Policy.Mode = PolicyAllowlist }, "", ""},
		{"policy bad mode", func(c *Config) { c.Policy.Mode = 2 }, "policy.mode", "want \"open\" or \"allowlist\""},
		{"policy query trust", func(c *Config) { c.Policy.QueryTrust = TrustVerified }, "", ""},
		{"policy query trust unset", func(c *Config) { c.Policy.QueryTrust = TrustDefault }, "policy.query_trust", "want \"untrusted\""},
		{"policy bad query trust", func(c *Config) { c.Policy.QueryTrust = 7 }, "policy.query_trust", "want \"untrusted\""},
		{"offer rate zero", func(c *Config) { c.Limits.OffersPerSecond = 0 }, "limits.offers_per_second", "want a positive rate"},
		{"query burst zero", func(c *Config) { c.Limits.QueryBurst = 0 }, "limits.query_burst", "want at least 1"},
		{"streams per peer zero", func(c *Config) { c.Limits.MaxStreamsPerPeer = 0 }, "limits.max_streams_per_peer", "want at least 1"},
		{"profile min trust", func(c *Config) { c.Profiles[0].MinTrust = TrustTrusted }, "", ""},
		{"profile bad min trust", func(c *Config) { c.Profiles[0].MinTrust = 4 }, "profiles[0].min_trust", "want \"untrusted\""},

		// Limits.
		{"frame min", func(c *Config) { c.Limits.MaxFrameBytes = 2 << 20 }, "", ""},
		{"frame max", func(c *Config) { c.Limits.MaxFrameBytes = 64 << 20 }, "", ""},
		{"frame too small", func(c *Config) { c.Limits.MaxFrameBytes = 2<<20 - 1 }, "limits.max_frame_bytes", "out of range"},
		{"frame too big", func(c *Config) { c.Limits.MaxFrameBytes = 64<<20 + 1 }, "limits.max_frame_bytes", "out of range"},
		{"idle zero", func(c *Config) { c.Limits.StreamIdleTimeout = 0 }, "limits.stream_idle_timeout", "want a positive duration"},
		{"idle negative", func(c *Config) { c.Limits.StreamIdleTimeout = Duration(-time.Second) }, "limits.stream_idle_timeout", "want a positive duration"},
		{"concurrent one", func(c *Config) { c.Limits.MaxRemoteConcurrent = 1 }, "", ""},
		{"untrusted slots none", func(c *Config) { c.Limits.UntrustedRemoteSlots = 0 }, "", ""},
		{"untrusted slots above the pool", func(c *Config) { c.Limits.UntrustedRemoteSlots = 5 }, "limits.untrusted_remote_slots", "want 0 to max_remote_concurrent"},
		{"concurrent zero", func(c *Config) { c.Limits.MaxRemoteConcurrent = 0 }, "limits.max_remote_concurrent", "want at least 1"},
		{"default timeout zero", func(c *Config) { c.Limits.DefaultTimeout = 0 }, "limits.default_timeout", "want a positive duration"},
		{"max timeout zero", func(c *Config) { c.Limits.MaxTimeout = 0 }, "limits.max_timeout", "want a positive duration"},
		{"default above max", func(c *Config) { c.Limits.DefaultTimeout = Duration(2 * time.Hour) }, "limits.default_timeout", `2h is above limits.max_timeout (1h)`},
		{"default equals max", func(c *Config) { c.Limits.DefaultTimeout = c.Limits.MaxTimeout }, "", ""},
		{"hop 1", func(c *Config) { c.Limits.DefaultHopLimit = 1 }, "", ""},
		{"hop 16", func(c *Config) { c.Limits.DefaultHopLimit = 16 }, "", ""},
		{"hop 0", func(c *Config) { c.Limits.DefaultHopLimit = 0 }, "limits.default_hop_limit", "want 1 to 16"},
		{"hop 17", func(c *Config) { c.Limits.DefaultHopLimit = 17 }, "limits.default_hop_limit", "want 1 to 16"},
		{"skew zero", func(c *Config) { c.Limits.EnvelopeMaxSkew = 0 }, "limits.envelope_max_skew", "want a positive duration"},
		{"skew 10m", func(c *Config) { c.Limits.EnvelopeMaxSkew = Duration(10 * time.Minute) }, "", ""},
		{"skew too large", func(c *Config) { c.Limits.EnvelopeMaxSkew = Duration(11 * time.Minute) }, "limits.envelope_max_skew", "above 10m"},

		// Profiles, any executor.
		{"no profiles", func(c *Config) { c.Profiles = nil }, "", ""},
		{"name required", func(c *Config) { c.Profiles[0].Name = "" }, "profiles[0].name", "required"},
		{"name upper case", func(c *Config) { c.Profiles[0].Name = "Echo" }, "profiles[0].name", "is not a profile name"},
		{"name leading dash", func(c *Config) { c.Profiles[0].Name = "-echo" }, "profiles[0].name", "is not a profile name"},
		{"name space", func(c *Config) { c.Profiles[0].Name = "my echo" }, "profiles[0].name", "is not a profile name"},
		{"name punctuation", func(c *Config) { c.Profiles[0].Name = "llama-3.1_8b" }, "", ""},
		{"name 64", func(c *Config) { c.Profiles[0].Name = strings.Repeat("a", 64) }, "", ""},
		{"name 65", func(c *Config) { c.Profiles[0].Name = strings.Repeat("a", 65) }, "profiles[0].name", "is not a profile name"},
		{"name duplicate", func(c *Config) { c.Profiles = append(c.Profiles, execProfile("echo")) }, "profiles[1].name", `"echo" is already the name of profiles[0]`},
		{"description too long", func(c *Config) { c.Profiles[0].Description = strings.Repeat("x", 1025) }, "profiles[0].description", "at most 1024"},
		{"skills ok", func(c *Config) { c.Profiles[0].Skills = []string{"chat", "code"} }, "", ""},
		{"skill empty", func(c *Config) { c.Profiles[0].Skills = []string{"chat", ""} }, "profiles[0].skills[1]", "want 1 to 64 bytes"},
		{"skill too long", func(c *Config) { c.Profiles[0].Skills = []string{strings.Repeat("s", 65)} }, "profiles[0].skills[0]", "want 1 to 64 bytes"},
		{"too many skills", func(c *Config) { c.Profiles[0].Skills = strings.Split(strings.Repeat("s,", 64)+"s", ",") }, "profiles[0].skills", "at most 64"},
		{"too many profiles", func(c *Config) {
			c.Profiles = nil
			for i := range 65 {
				c.Profiles = append(c.Profiles, Profile{Name: fmt.Sprint("p", i), Executor: ExecutorEcho})
			}
		}, "profiles", "at most 64"},
		{"executor required", func(c *Config) { c.Profiles[0].Executor = "" }, "profiles[0].executor", `required; want "echo", "exec", "openai" or "a2a"`},
		{"executor unknown", func(c *Config) { c.Profiles[0].Executor = "grpc" }, "profiles[0].executor", `unknown executor "grpc"`},
		{"a2a needs url", func(c *Config) { c.Profiles[0].Executor = ExecutorA2A }, "profiles[0].url", "required when executor = \"a2a\""},
		{"a2a url with credentials", func(c *Config) {
			c.Profiles[0].Executor, c.Profiles[0].URL = ExecutorA2A, "http://u:p@127.0.0.1:9"
		}, "profiles[0].url", "carries credentials"},
		{"a2a with model", func(c *Config) {
			c.Profiles[0].Executor, c.Profiles[0].URL, c.Profiles[0].Model = ExecutorA2A, "http://127.0.0.1:9", "m"
		}, "profiles[0].model", `only for executor = "openai"`},
		{"a2a ok", func(c *Config) {
			c.Profiles[0].Executor, c.Profiles[0].URL, c.Profiles[0].APIKeyEnv = ExecutorA2A, "http://127.0.0.1:9", "TOKEN"
		}, "", ""},
		{"api listen loopback", func(c *Config) { c.API.Listen = "127.0.0.1:0" }, "", ""},
		{"api listen not host:port", func(c *Config) { c.API.Listen = "8080" }, "api.listen", "not host:port"},
		{"api listen hostname", func(c *Config) { c.API.Listen = "example.org:80" }, "api.listen", "IP address or localhost"},
		{"api public url", func(c *Config) { c.API.PublicURL = "ftp://x" }, "api.public_url", "not an http or https URL"},
		{"api body cap", func(c *Config) { c.API.MaxBodyBytes = 10 }, "api.max_body_bytes", "want 1024"},
		{"timeout within max", func(c *Config) { c.Profiles[0].Timeout = Duration(time.Hour) }, "", ""},
		{"timeout above max", func(c *Config) { c.Profiles[0].Timeout = Duration(61 * time.Minute) }, "profiles[0].timeout", "above limits.max_timeout"},
		{"timeout negative", func(c *Config) { c.Profiles[0].Timeout = Duration(-time.Second) }, "profiles[0].timeout", "is negative"},
		{"budget and vram", func(c *Config) { c.Profiles[0].MaxBudgetTokens, c.Profiles[0].VRAMMiB = 1<<20, 24576 }, "", ""},

		// exec.
		{"exec ok", func(c *Config) {
			p := execProfile("run")
			p.Dir, p.Env = "/srv/work", []string{"LANG=C.UTF-8", "EMPTY=", "X_1=a=b"}
			c.Profiles = append(c.Profiles, p)
		}, "", ""},
		{"exec without command", func(c *Config) { c.Profiles = append(c.Profiles, Profile{Name: "run", Executor: ExecutorExec}) }, "profiles[1].command", `required when executor = "exec"`},
		{"exec empty program", func(c *Config) {
			p := execProfile("run")
			p.Command = []string{"", "-x"}
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].command", "command[0], is empty"},
		{"exec relative dir", func(c *Config) {
			p := execProfile("run")
			p.Dir = "work"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].dir", "is not an absolute path"},
		{"exec env without =", func(c *Config) {
			p := execProfile("run")
			p.Env = []string{"LANG"}
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].env[0]", `want "NAME=value"`},
		{"exec env bad name", func(c *Config) {
			p := execProfile("run")
			p.Env = []string{"OK=1", "1BAD=2"}
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].env[1]", `want "NAME=value"`},
		{"exec env duplicate", func(c *Config) {
			p := execProfile("run")
			p.Env = []string{"A=1", "A=2"}
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].env[1]", "already set by env[0]"},
		{"exec with url", func(c *Config) {
			p := execProfile("run")
			p.URL = "http://x"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", `only for executor = "openai" or "a2a"; this profile's executor is "exec"`},

		// openai.
		{"openai ok", func(c *Config) {
			p := openAIProfile("llama")
			p.APIKeyEnv, p.System = "OPENAI_API_KEY", "Be brief."
			c.Profiles = append(c.Profiles, p)
		}, "", ""},
		{"openai https ok", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = "https://api.example.com/v1/"
			c.Profiles = append(c.Profiles, p)
		}, "", ""},
		{"openai without url", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = ""
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", `required when executor = "openai"`},
		{"openai ftp url", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = "ftp://127.0.0.1/v1"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", "is not an http or https URL"},
		{"openai url without scheme", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = "127.0.0.1:11434/v1"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", ""},
		{"openai url without host", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = "http:///v1"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", "has no host"},
		{"openai url with query", func(c *Config) {
			p := openAIProfile("llama")
			p.URL = "http://127.0.0.1:11434/v1?key=x"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].url", "may not have a query"},
		{"openai without model", func(c *Config) {
			p := openAIProfile("llama")
			p.Model = ""
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].model", `required when executor = "openai"`},
		{"openai key in api_key_env", func(c *Config) {
			p := openAIProfile("llama")
			p.APIKeyEnv = "sk-abc123"
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].api_key_env", "is not an environment variable name"},
		{"openai with command", func(c *Config) {
			p := openAIProfile("llama")
			p.Command = []string{"/bin/cat"}
			c.Profiles = append(c.Profiles, p)
		}, "profiles[1].command", `only for executor = "exec"`},

		// echo with keys of other executors.
		{"echo with dir", func(c *Config) { c.Profiles[0].Dir = "/tmp" }, "profiles[0].dir", `only for executor = "exec"`},
		{"echo with env", func(c *Config) { c.Profiles[0].Env = []string{"A=1"} }, "profiles[0].env", `only for executor = "exec"`},
		{"echo with model", func(c *Config) { c.Profiles[0].Model = "m" }, "profiles[0].model", `only for executor = "openai"`},
		{"echo with api_key_env", func(c *Config) { c.Profiles[0].APIKeyEnv = "K" }, "profiles[0].api_key_env", `only for executor = "openai"`},
		{"echo with system", func(c *Config) { c.Profiles[0].System = "s" }, "profiles[0].system", `only for executor = "openai"`},
		{"unknown executor skips key checks", func(c *Config) { c.Profiles[0].Executor, c.Profiles[0].Model = "x", "m" }, "profiles[0].executor", "unknown executor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			ke := keyErrors(t, err)
			if len(ke) != 1 {
				t.Fatalf("want exactly one problem, got %d:\n%v", len(ke), err)
			}
			if ke[0].Key != tt.wantKey {
				t.Errorf("key = %q, want %q (%v)", ke[0].Key, tt.wantKey, ke[0])
			}
			if !strings.Contains(ke[0].Msg, tt.wantMsg) {
				t.Errorf("message %q does not contain %q", ke[0].Msg, tt.wantMsg)
			}
			if want := tt.wantKey + ": "; !strings.HasPrefix(ke[0].Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", ke[0].Error(), want)
			}
		})
	}
}
