package protocol

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kithmesh/kith/crypto"
)

type acceptResult struct {
	c     *Conn
	first Message
	raw   []byte
	err   error
}

func pipeConns(t *testing.T, first Message, acceptAs *crypto.Identity) (*Conn, acceptResult, error) {
	t.Helper()
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	if acceptAs == nil {
		acceptAs = bob
	}
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	ch := make(chan acceptResult, 1)
	go func() {
		c, m, raw, err := Accept(b, acceptAs, alice.PeerID(), crypto.NewMemoryReplayCache(nil), ConnOptions{IOTimeout: 2 * time.Second})
		if err != nil {
			b.Close()
		}
		ch <- acceptResult{c, m, raw, err}
	}()
	c, err := Dial(a, alice, bob.PeerID(), first, ConnOptions{IOTimeout: 2 * time.Second})
	return c, <-ch, err
}

func TestConnRoundTrip(t *testing.T) {
	offer := &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Role: "user", Parts: []Part{TextPart("hello")}}}
	c, res, err := pipeConns(t, offer, nil)
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	got, ok := res.first.(*DelegationOffer)
	if !ok || got.ID != offer.ID || got.Task.Parts[0].Text != "hello" {
		t.Fatalf("first message %+v", res.first)
	}
	want, _ := EncodeMessage(offer)
	if string(res.raw) != string(want) {
		t.Fatal("Accept's raw bytes are not the encoded offer")
	}
	go func() { _ = res.c.Send(&DelegationAccept{ID: offer.ID, ProviderHandle: "h"}) }()
	m, err := c.Recv(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := m.(*DelegationAccept); !ok || a.ID != offer.ID {
		t.Fatalf("reply %+v", m)
	}
}

func TestConnWrongRecipient(t *testing.T) {
	carol := fixedIdentity(t, 3)
	_, res, _ := pipeConns(t, &CapabilityQuery{Versions: Supported}, carol)
	if !errors.Is(res.err, crypto.ErrWrongRecipient) {
		t.Fatalf("got %v, want ErrWrongRecipient", res.err)
	}
}

func TestConnRecvDeadline(t *testing.T) {
	c, res, err := pipeConns(t, &CapabilityQuery{Versions: Supported}, nil)
	if err != nil || res.err != nil {
		t.Fatal(err, res.err)
	}
	start := time.Now()
	_, err = c.Recv(50 * time.Millisecond)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Recv on a silent stream: err %v after %s", err, time.Since(start))
	}
}
