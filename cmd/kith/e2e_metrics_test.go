package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/protocol"
)

// A real daemon that served a delegation, refused a denied peer and
// dropped a stream of garbage: its /metrics scrape moved the matching
// series and passes promtool's lint; "kith dashboard" prints a URL that
// serves the page.
func TestE2EMetricsAndDashboard(t *testing.T) {
	a, b := pair(t, a2aGatewayConfig)
	a.kith("delegate", "--profile", "echo", "--peer", b.id, "--budget", "100", "hello").mustSucceed(t)

	// A denied peer knocks.
	c := newNode(t, testDir(t), "c", "")
	c.start()
	b.kith("peers", "deny", c.id).mustSucceed(t)
	_ = c.kith("peers", "add", b.addr("/tcp/"))

	// Garbage where an envelope should be.
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ai, err := peer.AddrInfoFromP2pAddr(ma.StringCast(b.addr("/tcp/")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, ai.ID, protocol.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte{0x05, 'h', 'e', 'l', 'l', 'o'})
	_ = s.CloseWrite()
	_, _ = io.ReadAll(s)

	token := strings.TrimSpace(b.kith("api", "token").stdout)
	base := b.httpBase()
	get := func(url string, auth bool) (int, []byte) {
		req, _ := http.NewRequest("GET", url, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if code, _ := get(base+"/metrics", false); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	want := []string{
		`kith_delegations_started_total{profile="echo",side="provider"}`,
		`kith_delegations_ended_total{profile="echo",reason="none",side="provider",state="completed"}`,
		`kith_inbound_streams_refused_total{reason="malformed"}`,
		`kith_peers_refused_total{what="connection"}`,
		`kith_store_commit_seconds_count`,
	}
	var body []byte
	deadline := time.Now().Add(stateWait)
	for {
		var code int
		code, body = get(base+"/metrics", true)
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d %s", code, body)
		}
		missing := ""
		for _, w := range want {
			if sample(body, w) < 1 {
				missing = w
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not move; scrape:\n%s", missing, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(string(body), a.id) || strings.Contains(string(body), c.id) {
		t.Error("a peer ID in the scrape")
	}

	if path, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool check metrics: %v\n%s", err, out)
		}
	} else if os.Getenv("KITH_PROMTOOL_REQUIRED") == "1" {
		t.Fatal("promtool not found and KITH_PROMTOOL_REQUIRED=1 (apt-get install prometheus)")
	} else {
		t.Log("promtool not found (apt-get install prometheus): the scrape was not linted")
	}

	r := b.kith("dashboard")
	r.mustSucceed(t)
	url := strings.SplitN(r.stdout, "\n", 2)[0]
	if !strings.HasPrefix(url, base) || !strings.HasSuffix(url, "/dashboard/") {
		t.Fatalf("kith dashboard printed %q; the listener is %s", url, base)
	}
	if code, page := get(url, false); code != http.StatusOK || !bytes.Contains(page, []byte("app.js")) {
		t.Fatalf("GET %s: %d", url, code)
	}
}

// sample returns the value of the sample named exactly series (name and
// labels as Prometheus prints them), or -1.
func sample(body []byte, series string) float64 {
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
