// Package demo is "kith demo": two nodes on loopback with temporary
// homes, one task delegated between them through the real stack, every
// message printed as it crosses, then the verified result proof.
package demo

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// Run starts two nodes on loopback with temporary homes, delegates one
// task from the first to the second through the real stack (libp2p, the
// sealed envelope, durable stores), and writes each message type as it
// crosses the wire, then the verified result proof.
func Run(ctx context.Context, w io.Writer, text string) error {
	tmp, err := os.MkdirTemp("", "kith-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var mu sync.Mutex
	names := map[peer.ID]string{}
	trace := func(self string) delegation.Trace {
		return func(dir delegation.Direction, remote peer.ID, m protocol.Message) {
			if dir != delegation.Sent {
				return // each message is printed once, by its sender
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "  %-5s → %-5s  %s\n", self, names[remote], m.Type())
		}
	}
	start := func(name string) (*node.Node, <-chan error, error) {
		home := filepath.Join(tmp, name)
		if _, err := node.Init(home, []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}); err != nil {
			return nil, nil, err
		}
		cfg, err := node.LoadConfig(home)
		if err != nil {
			return nil, nil, err
		}
		// Two nodes on loopback: nothing to discover or map, and nothing
		// may multicast out of the machine.
		cfg.Discovery.MDNS, cfg.Discovery.DHT, cfg.NAT.PortMapping = false, config.DHTOff, false
		n, err := node.New(home, cfg, node.Options{Trace: trace(name)})
		if err != nil {
			return nil, nil, err
		}
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		select {
		case <-n.Ready():
		case err := <-done:
			return nil, nil, err
		}
		mu.Lock()
		names[n.PeerID()] = name
		mu.Unlock()
		return n, done, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	alice, aliceDone, err := start("alice")
	if err != nil {
		return err
	}
	defer func() { cancel(); <-aliceDone }()
	bob, bobDone, err := start("bob")
	if err != nil {
		return err
	}
	defer func() { cancel(); <-bobDone }()

	fmt.Fprintf(w, "alice %s\nbob   %s\n", alice.PeerID(), bob.PeerID())
	for _, a := range bob.Addrs() {
		fmt.Fprintf(w, "      %s\n", a)
	}
	ai, err := node.AddPeerToStore(alice.Store(), bob.Addrs()[0], "static")
	if err != nil {
		return err
	}
	alice.Host().Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	err = alice.Host().Connect(cctx, ai)
	ccancel()
	if err != nil {
		return fmt.Errorf("alice cannot reach bob: %w", err)
	}

	fmt.Fprintf(w, "\nalice delegates %q to bob (profile echo):\n", text)
	eng := alice.Engine()
	id, err := eng.Delegate(ctx, delegation.Request{
		Profile: "echo", Peer: bob.PeerID(), BudgetTokens: 256, Timeout: 30 * time.Second,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(text)}},
	})
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	d, err := eng.Wait(wctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\ndelegation %s: %s\nresult: %q\n", id, d.State, delegation.Output(d))
	p, err := eng.Verify(id)
	if err != nil {
		return fmt.Errorf("result proof: %w", err)
	}
	fmt.Fprintf(w, "proof: valid, signed by bob\n  offer      %s:%s\n  transcript %s:%s\n  tokens     %d prompt, %d completion\n",
		p.Digest, hex.EncodeToString(p.OfferHash[:]), p.Digest, hex.EncodeToString(p.TranscriptHash[:]), p.Usage.Prompt, p.Usage.Completion)
	if d.State != protocol.StateCompleted {
		return fmt.Errorf("delegation ended %s: %s", d.State, d.Reason)
	}
	if !strings.EqualFold(delegation.Output(d), text) {
		return fmt.Errorf("echo returned %q", delegation.Output(d))
	}
	return nil
}
