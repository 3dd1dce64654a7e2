package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/node/gateway"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

type noEngine struct{}

func (noEngine) Delegate(context.Context, delegation.Request) (protocol.DelegationID, error) {
	return protocol.DelegationID{}, delegation.ErrNotRunning
}
func (noEngine) Cancel(protocol.DelegationID, string) error { return delegation.ErrUnknown }
func (noEngine) Reply(context.Context, protocol.DelegationID, protocol.Task) error {
	return delegation.ErrUnknown
}
func (noEngine) Question(protocol.DelegationID) (delegation.Question, error) {
	return delegation.Question{}, delegation.ErrUnknown
}
func (noEngine) Subscribe(store.Role, protocol.DelegationID) (<-chan store.Event, func()) {
	return nil, func() {}
}
func (noEngine) Profiles() []protocol.Profile { return []protocol.Profile{{Name: "echo"}} }
func (noEngine) KnownCapabilities() map[peer.ID]delegation.KnownCapability {
	return nil
}

func TestTokenFile(t *testing.T) {
	home := t.TempDir()
	a, err := EnsureToken(home)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(home, TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if b, _ := EnsureToken(home); b != a {
		t.Fatal("EnsureToken changed an existing token")
	}
	c, err := RotateToken(home)
	if err != nil || c == a || !strings.HasPrefix(c, tokenPrefix) {
		t.Fatalf("RotateToken = %q, %v", c, err)
	}
	if got, _ := ReadToken(home); got != c {
		t.Fatalf("ReadToken after rotate = %q, want %q", got, c)
	}
}

func TestListenerAuth(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	n := &Node{cfg: cfg}
	h := &httpAPI{n: n, required: true, token: "kith_right-token-right-token"}
	gw := gateway.New(gateway.Config{Engine: noEngine{}, Identity: id, BaseURL: func() string { return "http://x" }, TokenRequired: true, MaxBodyBytes: 1 << 20})
	srv := httptest.NewServer(h.handler(gw))
	defer srv.Close()

	do := func(method, path, auth string) (*http.Response, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, c := range []struct {
		name, method, path, auth string
		status                   int
	}{
		{"REST without token", "GET", "/api/v1/a2a/profiles", "", 401},
		{"REST with a wrong token", "GET", "/api/v1/a2a/profiles", "Bearer kith_wrong", 401},
		{"REST with a Basic header", "GET", "/api/v1/a2a/profiles", "Basic a2l0aDp4", 401},
		{"JSON-RPC without token", "POST", "/a2a/echo", "", 401},
		{"unknown path with token", "GET", "/nope", "Bearer kith_right-token-right-token", 404},
		{"card is public", "GET", "/.well-known/agent-card.json", "", 200},
		{"profile card is public", "GET", "/a2a/echo/.well-known/agent-card.json", "", 200},
		{"OpenAPI is public", "GET", OpenAPIPath, "", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := do(c.method, c.path, c.auth)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, c.status)
			}
			if c.status == 401 {
				if resp.Header.Get("WWW-Authenticate") == "" || !strings.Contains(body, "kith api token") {
					t.Fatalf("401 without WWW-Authenticate or a hint: %s", body)
				}
				if c.method == "POST" {
					var rpc struct {
						Error struct{ Code int } `json:"error"`
					}
					if json.Unmarshal([]byte(body), &rpc) != nil || rpc.Error.Code != -31401 {
						t.Fatalf("JSON-RPC 401 body %s, want code -31401", body)
					}
				}
			}
		})
	}
	// A rotated token replaces the old one at once.
	h.setToken("kith_new-token-new-token-new")
	if resp, _ := do("GET", "/nope", "Bearer kith_right-token-right-token"); resp.StatusCode != 401 {
		t.Fatalf("old token after rotation: %d, want 401", resp.StatusCode)
	}
}

func TestLoopbackRule(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "[::1]:8080": false, "localhost:1": false,
		"0.0.0.0:8080": true, ":8080": true, "192.168.1.2:80": true,
	} {
		if got := (config.API{Listen: addr}).TokenRequired(); got != want {
			t.Errorf("TokenRequired(%s) = %v, want %v", addr, got, want)
		}
	}
	if !(config.API{Listen: "127.0.0.1:1", RequireToken: true}).TokenRequired() {
		t.Error("require_token on loopback is ignored")
	}
}
