package node

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// scrape reads n's /metrics over the [api] listener with its token.
func scrape(t *testing.T, n *Node) []byte {
	t.Helper()
	tok, err := ReadToken(n.home)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+n.HTTPAddr()+MetricsPath, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %s", resp.Status, body)
	}
	return body
}

// series returns the value of every sample in a scrape, keyed by its
// name and labels as Prometheus prints them.
func series(t *testing.T, body []byte) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[name+"_count{"+strings.Join(labels, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// A node that served delegations, refused a denied peer and dropped bad
// input shows each in the matching series, and the scrape passes
// promtool's lint.
func TestMetricsMoveWithEvents(t *testing.T) {
	b := startWith(t, func(c *config.Config) {
		c.API.Listen = "127.0.0.1:0"
		c.Profiles = append(c.Profiles, config.Profile{Name: "gpu", Executor: config.ExecutorEcho, MinTrust: config.TrustVerified})
	})
	a := startWith(t, nil)
	denied := startWith(t, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	run := func(profile string) protocol.State {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		id, err := a.Engine().Delegate(ctx, delegation.Request{Profile: profile, Peer: b.PeerID(), BudgetTokens: 10,
			Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := a.Engine().Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return d.State
	}
	if s := run("echo"); s != protocol.StateCompleted {
		t.Fatalf("echo: %s", s)
	}
	if s := run("gpu"); s != protocol.StateRejected {
		t.Fatalf("gpu from an unverified peer: %s, want rejected", s)
	}

	// Bad input: a stream that opens with garbage instead of an envelope.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := a.Host().NewStream(ctx, b.PeerID(), protocol.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte{0x05, 'h', 'e', 'l', 'l', 'o'})
	_ = s.CloseWrite()
	_, _ = io.ReadAll(s)

	// A denied peer knocks.
	change(t, b, denied.PeerID(), api.PeerChange{Access: new(api.AccessDeny)})
	if err := connect(denied, b); err == nil {
		labtest.WaitFor(t, 10*time.Second, "B drops the denied peer", func() bool { return !connected(denied, b) })
	}

	want := map[string]func(float64) bool{
		`kith_delegations_started_total{profile=echo,side=provider}`:                           eq(1),
		`kith_delegations_ended_total{profile=echo,reason=none,side=provider,state=completed}`: eq(1),
		`kith_offers_rejected_total{reason=not_allowed}`:                                       eq(1),
		`kith_inbound_streams_refused_total{reason=malformed}`:                                 eq(1),
		`kith_peers_refused_total{what=connection}`:                                            atLeast(1),
		`kith_store_commit_seconds_count{}`:                                                    atLeast(1),
		`kith_remote_pool_slots_in_use{}`:                                                      eq(0),
		`kith_connections{path=direct,transport=tcp}`:                                          atLeast(1),
	}
	var got map[string]float64
	var body []byte
	labtest.WaitFor(t, 10*time.Second, "the series moved", func() bool {
		body = scrape(t, b)
		got = series(t, body)
		for k, ok := range want {
			if !ok(got[k]) {
				return false
			}
		}
		return true
	})
	for k := range got {
		if strings.Contains(k, a.PeerID().String()) || strings.Contains(k, denied.PeerID().String()) {
			t.Errorf("a peer ID in a series: %s", k)
		}
	}
	rec := httptest.NewRecorder()
	a.metrics.handler().ServeHTTP(rec, httptest.NewRequest("GET", MetricsPath, nil))
	ra := series(t, rec.Body.Bytes())
	if ra[`kith_delegation_round_trip_seconds_count{remote=true}`] != 2 ||
		ra[`kith_delegations_ended_total{profile=gpu,reason=not_allowed,side=requester,state=rejected}`] != 1 {
		t.Errorf("requester series: round trips %v, rejected %v", ra[`kith_delegation_round_trip_seconds_count{remote=true}`],
			ra[`kith_delegations_ended_total{profile=gpu,reason=not_allowed,side=requester,state=rejected}`])
	}
	promtoolCheck(t, body)
}

func eq(v float64) func(float64) bool      { return func(x float64) bool { return x == v } }
func atLeast(v float64) func(float64) bool { return func(x float64) bool { return x >= v } }

// promtoolCheck runs Prometheus's own linter on a scrape. Without promtool
// it skips, except under KITH_PROMTOOL_REQUIRED=1 (set by .ci/run), where
// a skip proves nothing and fails.
func promtoolCheck(t *testing.T, body []byte) {
	t.Helper()
	path := labtest.Tool(t, labtest.PromtoolRequired, "promtool", "prometheus")
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// The README's metric list and the Grafana dashboard name only series a
// node registers, and the README lists every one of them.
func TestMetricDocsMatchRegistry(t *testing.T) {
	n := startWith(t, nil)
	ch := make(chan *prometheus.Desc)
	go func() { n.metrics.reg.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	registered := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], "kith_") && !strings.HasPrefix(m[1], "kith_process_") {
			registered[m[1]] = true
		}
	}
	name := regexp.MustCompile(`kith_[a-z_]+[a-z]`)
	for _, doc := range []string{"../README.md", "../docs/grafana/kith.json"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range name.FindAllString(string(b), -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if s, ok := strings.CutSuffix(m, suffix); ok && registered[s] {
					m = s
				}
			}
			if strings.HasPrefix(m, "kith_process") || m == "kith_session" {
				continue
			}
			seen[m] = true
			if !registered[m] {
				t.Errorf("%s names %s, which no node registers", doc, m)
			}
		}
		if doc == "../README.md" {
			for m := range registered {
				if !seen[m] {
					t.Errorf("README.md does not list %s", m)
				}
			}
		}
	}
}
