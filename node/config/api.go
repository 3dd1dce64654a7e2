package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/kithmesh/kith/node/api"
)

// API is the [api] table: the HTTP listener that serves the REST API (the
// same routes as the unix socket, under /api/v1/a2a/), its OpenAPI
// document, and the A2A gateway (agent cards, JSON-RPC and HTTP+JSON).
type API struct {
	// Listen is the TCP address ("host:port") of the HTTP listener. Default:
	// "", no listener: the daemon opens no TCP port unless asked. Use
	// "127.0.0.1:8080" for agents on this machine; any address that is not
	// loopback always requires the bearer token.
	Listen string `toml:"listen"`

	// RequireToken requires the bearer token on a loopback listener too
	// (other users of a shared machine can reach loopback). Default: false.
	// A listener that is not on loopback requires the token whatever this
	// says. The token is <home>/api.token; "kith api token" prints it.
	RequireToken bool `toml:"require_token"`

	// PublicURL is the base URL written into agent cards, for a listener
	// behind a reverse proxy or port forward, e.g. "https://kith.lab.example".
	// Default: "", which means "http://" + the address actually bound.
	PublicURL string `toml:"public_url"`

	// MaxBodyBytes caps one request body; larger ones are refused (413)
	// before they are decoded. Default: 100663296 (96 MiB), room for a task
	// as large as a delegation carries (64 MiB of content) as JSON text or
	// as a base64 file part; 1024 to 403701760 (a task of 64 MiB whose
	// every byte JSON escapes as \u00XX). Bodies over 1 MiB share a
	// budget of twice this, read at once; past it a request is refused
	// (503, Retry-After) before its body is read.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
}

// DefaultMaxBodyBytes is API.MaxBodyBytes's default: 64 MiB of task as a
// base64 file part takes 85.3 MiB, and the JSON around it little more.
const DefaultMaxBodyBytes = 96 << 20

// MaxMaxBodyBytes is the largest API.MaxBodyBytes: the unix socket's own
// cap on a delegation request (api.MaxDelegateBody).
const MaxMaxBodyBytes = api.MaxDelegateBody

// Enabled reports whether the HTTP listener is configured.
func (a API) Enabled() bool { return a.Listen != "" }

// TokenRequired reports whether requests need the bearer token: always
// off loopback, and on loopback when RequireToken says so.
func (a API) TokenRequired() bool {
	return a.RequireToken || !IsLoopbackListen(a.Listen)
}

// IsLoopbackListen reports whether a "host:port" address binds only
// loopback. "localhost" counts; an empty host (all interfaces) does not.
func IsLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (a API) validate(ps *problems) {
	if a.Listen != "" {
		host, port, err := net.SplitHostPort(a.Listen)
		if err != nil {
			ps.add("api.listen", "%q is not host:port: %v", a.Listen, err)
		} else {
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || (port != "0" && n == 0) {
				ps.add("api.listen", "%q: port %q is not 0 to 65535", a.Listen, port)
			}
			if host != "" && host != "localhost" && net.ParseIP(host) == nil {
				ps.add("api.listen", "%q: host must be an IP address or localhost", a.Listen)
			}
		}
	}
	if a.PublicURL != "" {
		if msg := checkBaseURL(a.PublicURL); msg != "" {
			ps.add("api.public_url", "%q %s", a.PublicURL, msg)
		}
	}
	if a.MaxBodyBytes < 1024 || a.MaxBodyBytes > MaxMaxBodyBytes {
		ps.add("api.max_body_bytes", "%d; want 1024 to %d", a.MaxBodyBytes, MaxMaxBodyBytes)
	}
}

func (p Profile) validateA2A(ps *problems, key string) {
	if p.URL == "" {
		ps.add(key+".url", "required when executor = %q; the agent's base URL, e.g. \"http://127.0.0.1:9999\"", ExecutorA2A)
	} else if msg := checkBaseURL(p.URL); msg != "" {
		ps.add(key+".url", "%q %s", p.URL, msg)
	} else if u, _ := url.Parse(p.URL); u.User != nil {
		ps.add(key+".url", "%q carries credentials; put a bearer token in the environment and name it in api_key_env", p.URL)
	}
	if p.APIKeyEnv != "" && !envNameRe.MatchString(p.APIKeyEnv) {
		ps.add(key+".api_key_env", "%q is not an environment variable name; put the token itself in the environment, not here", p.APIKeyEnv)
	}
}

// describeAPI is the [api] block of the commented default file.
func (w *fileWriter) describeAPI(a API) {
	w.line("[api]")
	w.comment("HTTP listener for the REST API (/api/v1/a2a/..., OpenAPI at /api/v1/openapi.json)")
	w.comment("and the A2A gateway (agent cards at /.well-known/agent-card.json and")
	w.comment("/a2a/<profile>/.well-known/agent-card.json). \"\" opens no TCP port; e.g.")
	w.comment("\"127.0.0.1:8080\" for agents on this machine. Off loopback the bearer token")
	w.comment("in <home>/api.token is always required (kith api token prints it).")
	w.show("listen", tomlString(a.Listen))
	w.comment("Require the token on loopback too.")
	w.show("require_token", fmt.Sprint(a.RequireToken))
	w.comment("Base URL written into agent cards (behind a proxy); \"\" is http://<listen>.")
	w.show("public_url", tomlString(a.PublicURL))
	w.comment("Largest request body, in bytes: the default takes the largest task a")
	w.comment("delegation carries (64 MiB), as text or as a base64 file part.")
	w.show("max_body_bytes", fmt.Sprint(a.MaxBodyBytes))
	w.blank()
}
