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
	h := &httpAPI{n: n, required: true, token: "kith_right-token-right-token", bodies: newBodyBudget(cfg.API.MaxBodyBytes)}
	gw := gateway.New(gateway.Config{Engine: noEngine{}, Identity: id, BaseURL: func() string { return "http://x" }, TokenRequired: true, MaxBodyBytes: cfg.API.MaxBodyBytes})
	srv := httptest.NewServer(h.handler(gw))
	defer srv.Close()

	do := func(method, path, auth string) (*http.Response, string) {
		if auth == "" {
			return send(t, method, srv.URL+path, strings.NewReader(`{}`))
		}
		return send(t, method, srv.URL+path, strings.NewReader(`{}`), "Authorization", auth)
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

// TestBodyBudget: large request bodies share a budget of twice the cap on
// one; a request that finds no room is refused before its body is read,
// in the caller's shape (JSON-RPC or REST), and the room comes back once a
// body has been read. Small bodies never wait on it.
func TestBodyBudget(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	const maxBody = 2 << 20
	cfg := config.Default()
	cfg.API.MaxBodyBytes = maxBody
	h := &httpAPI{n: &Node{cfg: cfg}, bodies: newBodyBudget(maxBody)}
	gw := gateway.New(gateway.Config{Engine: noEngine{}, Identity: id, BaseURL: func() string { return "http://x" }, MaxBodyBytes: maxBody})
	srv := httptest.NewServer(h.handler(gw))
	defer srv.Close()

	large := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"` +
		strings.Repeat("x", 3<<19) + `"}]}}}`
	post := func(path string, body io.Reader) (*http.Response, string) {
		t.Helper()
		return send(t, "POST", srv.URL+path, body, "A2A-Version", "1.0")
	}
	busy := func(resp *http.Response, body string, rpc bool) bool {
		if resp.StatusCode != http.StatusServiceUnavailable {
			return false
		}
		if resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "busy") {
			t.Fatalf("503 without Retry-After or a reason: %s", body)
		}
		var m struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal([]byte(body), &m) != nil || rpc != strings.HasPrefix(string(m.Error), "{") {
			t.Fatalf("503 body %s: want a JSON-RPC error: %v", body, rpc)
		}
		return true
	}

	// The whole budget is taken: a large body is refused, a small one not.
	if !h.bodies.sem.TryAcquire(2 * maxBody) {
		t.Fatal("the budget is not twice the cap")
	}
	if resp, body := post("/a2a/echo", strings.NewReader(large)); !busy(resp, body, true) {
		t.Fatalf("JSON-RPC with %d bytes and no budget left: %d %s, want 503", len(large), resp.StatusCode, body)
	}
	if resp, body := post("/api/v1/a2a/delegations", strings.NewReader(large)); !busy(resp, body, false) {
		t.Fatalf("REST with %d bytes and no budget left: %d %s, want 503", len(large), resp.StatusCode, body)
	}
	if resp, body := post("/a2a/echo", strings.NewReader(`{}`)); resp.StatusCode == http.StatusServiceUnavailable {
		t.Fatalf("a small body waited on the budget: %s", body)
	}
	h.bodies.sem.Release(2 * maxBody)

	// With room, the large body is read (the engine here delegates
	// nothing), and its share comes back.
	if resp, body := post("/a2a/echo", strings.NewReader(large)); resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusRequestEntityTooLarge {
		t.Fatalf("JSON-RPC with %d bytes and room: %d %s", len(large), resp.StatusCode, body)
	}
	if !h.bodies.sem.TryAcquire(2 * maxBody) {
		t.Fatal("a large body's share did not come back")
	}
	h.bodies.sem.Release(2 * maxBody)

	// A body of no declared length takes the whole cap: with less left,
	// it is refused.
	if !h.bodies.sem.TryAcquire(maxBody + 1) {
		t.Fatal("budget")
	}
	chunked := struct{ io.Reader }{strings.NewReader(large)} // no length for the client to declare
	if resp, body := post("/a2a/echo", chunked); !busy(resp, body, true) {
		t.Fatalf("chunked body with less than the cap left: %d %s, want 503", resp.StatusCode, body)
	}
	h.bodies.sem.Release(maxBody + 1)
}

// send makes one request with a JSON Content-Type and the header pairs
// given, and returns the response and its body.
func send(t *testing.T, method, url string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}
