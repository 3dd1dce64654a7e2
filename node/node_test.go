package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/protocol"
)

// startNode runs a node on loopback (TCP, or the listen addresses given)
// until the returned cancel; done gives Run's error.
func startNode(t testing.TB, listen ...string) (_ *Node, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	if len(listen) == 0 {
		listen = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	if _, err := Init(home, listen); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(home)
	if err != nil {
		t.Fatal(err)
	}
	offHostNetwork(&cfg)
	n, err := New(home, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- n.Run(ctx) }()
	select {
	case <-n.Ready():
	case err := <-ran:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("node never became ready")
	}
	return n, cancel, ran
}

// A node's Run owns every goroutine it starts: after it returns, none is
// left (libp2p's and badger's included).
func TestRunStopsEverything(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	n, cancel, done := startNode(t)
	c := api.NewClient(n.SocketPath())
	defer c.Close()
	ctx, cctx := context.WithTimeout(context.Background(), 20*time.Second)
	defer cctx()
	id, err := c.Delegate(ctx, api.DelegateRequest{Profile: "echo", Text: "in-process"})
	if err != nil {
		t.Fatal(err)
	}
	var last api.Event
	if err := c.Events(ctx, id, func(ev api.Event) { last = ev }); err != nil {
		t.Fatal(err)
	}
	d, err := c.Delegation(ctx, id)
	if err != nil || d.State.String() != "completed" || d.Output != "in-process" || d.Remote || last.State.String() != "completed" {
		t.Fatalf("delegation %+v last event %+v err %v", d, last, err)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := os.Stat(n.SocketPath()); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestSocketIsPrivateAndSingle(t *testing.T) {
	n, cancel, done := startNode(t)
	defer func() { cancel(); <-done }()
	fi, err := os.Stat(n.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("socket mode %#o, want 0600", perm)
	}
	// A second daemon on the same home must refuse, not steal the socket.
	if _, err := listenSocket(n.SocketPath()); err == nil {
		t.Fatal("second listener on a live socket succeeded")
	}
}

// An answer to a question may be as large as a task: the reply endpoint
// takes a body of several MiB (here for an unknown delegation, so the
// engine's own answer shows the body was read), where it refused
// any over 1 MiB.
func TestReplyTakesADocument(t *testing.T) {
	n, cancel, done := startNode(t)
	defer func() { cancel(); <-done }()
	c := api.NewClient(n.SocketPath())
	defer c.Close()
	_, err := c.Reply(context.Background(), protocol.NewDelegationID().String(), strings.Repeat("an answer of several MiB ", 2<<20/25))
	if err == nil || !strings.Contains(err.Error(), "unknown delegation") {
		t.Fatalf("reply of 2 MiB to an unknown delegation: %v, want the engine's unknown delegation", err)
	}
}
