package main

// End-to-end tests of setting a node up: kith init, the daemon's start,
// and the errors on the way, through the real binary.

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2EDaemonFailsOnBusyPort: a listen address that cannot be bound
// stops the daemon with an error naming it and a non-zero exit, instead of
// a node that runs, and says it started, on its other addresses only.
func TestE2EDaemonFailsOnBusyPort(t *testing.T) {
	tests := []struct {
		name   string
		occupy func(t *testing.T) (addr string)
	}{
		{"tcp", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return "/ip4/127.0.0.1/tcp/" + portOf(t, l.Addr().String())
		}},
		{"quic", func(t *testing.T) string {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return "/ip4/127.0.0.1/udp/" + portOf(t, c.LocalAddr().String()) + "/quic-v1"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := testDir(t)
			busy := tt.occupy(t)
			listen := []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}
			if tt.name == "tcp" {
				listen[0] = busy
			} else {
				listen[1] = busy
			}
			n := initNode(t, dir, "n", listen, "[discovery]\nmdns = false\n[nat]\nport_mapping = false\n")
			b := n.kithBackground("daemon")
			deadline := time.After(startWait)
		wait:
			for {
				select {
				case l := <-b.lines:
					if strings.Contains(l, "node started") {
						t.Fatalf("the daemon started with %s taken: %q", busy, l)
					}
				case <-b.done:
					break wait
				case <-deadline:
					t.Fatalf("the daemon neither failed nor started within %v", startWait)
				}
			}
			r := b.wait(t)
			if r.code == 0 {
				t.Fatalf("daemon exited 0 with %s taken; %v", busy, r)
			}
			if want := "cannot listen on " + busy + ": "; !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "address already in use") {
				t.Errorf("stderr should say %q and why (address already in use); %v", want, r)
			}
			if _, err := os.Stat(n.socket()); err == nil {
				t.Errorf("the failed daemon left its socket at %s", n.socket())
			}
		})
	}
}

func portOf(t *testing.T, hostport string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestE2EInitChecksBeforeWriting: kith init refuses a listen address the
// daemon would refuse, names it, and writes nothing, so that the corrected
// command then works; its errors about an existing home say what to do.
func TestE2EInitChecksBeforeWriting(t *testing.T) {
	dir := testDir(t)
	home := filepath.Join(dir, "n")
	r := runKith(t, "--home", home, "init", "--listen", "/ip4/127.0.0.1/tcp/abc")
	if r.code == 0 || r.stdout != "" {
		t.Fatalf("init accepted a listen address that is not a multiaddr; %v", r)
	}
	if !strings.Contains(r.stderr, `listen[0]: "/ip4/127.0.0.1/tcp/abc" is not a multiaddr`) || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("init should name the bad address and say nothing was written; %v", r)
	}
	for _, f := range []string{"identity.key", "config.toml"} {
		if _, err := os.Stat(filepath.Join(home, f)); err == nil {
			t.Errorf("the refused init wrote %s", f)
		}
	}

	r = runKith(t, "--home", home, "init", "--listen", "/ip4/127.0.0.1/tcp/0")
	r.mustSucceed(t)
	if r := runKith(t, "--home", home, "daemon", "--check"); r.code != 0 || r.stdout != "config ok\n" {
		t.Fatalf("daemon --check after init: %v", r)
	}

	// A second init, with or without --listen, leads to the file to edit.
	cfg := filepath.Join(home, "config.toml")
	for _, args := range [][]string{{"init"}, {"init", "--listen", "/ip4/127.0.0.1/tcp/4002"}} {
		r = runKith(t, append([]string{"--home", home}, args...)...)
		if r.code == 0 {
			t.Fatalf("init on an initialized home succeeded; %v", r)
		}
		for _, want := range []string{"home already holds an identity", "edit " + cfg, "kith daemon --check"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("kith %s: stderr lacks %q; %v", strings.Join(args, " "), want, r)
			}
		}
	}

	// A home with a config but no identity: init checks the config it
	// keeps, and refuses --listen, which it would ignore.
	other := filepath.Join(dir, "m")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	otherCfg := filepath.Join(other, "config.toml")
	if err := os.WriteFile(otherCfg, []byte("listen = [\"/ip4/127.0.0.1/tcp/abc\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runKith(t, "--home", other, "init")
	if r.code == 0 || !strings.Contains(r.stderr, otherCfg+":1:11: listen[0]") || !strings.Contains(r.stderr, "nothing was written") {
		t.Errorf("init over an invalid config: want a failure naming %s:1:11: listen[0]; %v", otherCfg, r)
	}
	if err := os.WriteFile(otherCfg, []byte("listen = [\"/ip4/127.0.0.1/tcp/0\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runKith(t, "--home", other, "init", "--listen", "/ip4/127.0.0.1/tcp/4003")
	if r.code == 0 || !strings.Contains(r.stderr, "edit its listen key instead of passing --listen") {
		t.Errorf("init --listen over an existing config: want a failure saying to edit the file; %v", r)
	}
	if _, err := os.Stat(filepath.Join(other, "identity.key")); err == nil {
		t.Error("a refused init wrote an identity")
	}
	runKith(t, "--home", other, "init").mustSucceed(t)
}

// TestE2EBrokenIdentityHint: a daemon whose identity key is damaged says
// how to recover, not "run kith init", which would refuse the home.
func TestE2EBrokenIdentityHint(t *testing.T) {
	dir := testDir(t)
	n := newNode(t, dir, "n", "")
	key := filepath.Join(n.home, "identity.key")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := n.kith("daemon")
	if r.code == 0 {
		t.Fatalf("daemon ran with a damaged identity; %v", r)
	}
	if strings.Contains(r.stderr, "init first") || !strings.Contains(r.stderr, "restore it from a backup") || !strings.Contains(r.stderr, "move it away") {
		t.Errorf("the damaged-identity error should say to restore the key or move it away; %v", r)
	}
}
