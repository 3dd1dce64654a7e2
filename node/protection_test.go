package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// goodRound runs sequential echo delegations from a to b for d, at most
// one per goodPace (a well-behaved peer stays under the provider's offer
// rate), and returns their round trips; every one must complete.
func goodRound(t *testing.T, a, b *Node, d time.Duration) []time.Duration {
	t.Helper()
	var rts []time.Duration
	ctx := context.Background()
	for end := time.Now().Add(d); time.Now().Before(end); {
		start := time.Now()
		id, err := a.Engine().Delegate(ctx, delegation.Request{Profile: "echo", Peer: b.PeerID(), BudgetTokens: 16,
			Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("ping")}}})
		if err != nil {
			t.Fatalf("good peer: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		dl, err := a.Engine().Wait(wctx, id)
		cancel()
		if err != nil || dl.State != protocol.StateCompleted {
			t.Fatalf("good peer's delegation %s: state %s reason %q err %v", id, dl.State, dl.Reason, err)
		}
		rts = append(rts, time.Since(start))
		time.Sleep(goodPace - time.Since(start))
	}
	return rts
}

const goodPace = 50 * time.Millisecond // 20 offers per second at most

func pct(rts []time.Duration, p float64) time.Duration {
	s := slices.Clone(rts)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// flood sends offers from f to b on fresh streams as fast as it can until
// ctx ends, counting the answers by type.
func flood(ctx context.Context, f *Node, id *crypto.Identity, b *Node, workers int) (rateLimited, other *atomic.Int64) {
	rateLimited, other = new(atomic.Int64), new(atomic.Int64)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				s, err := f.Host().NewStream(ctx, b.PeerID(), protocol.ID)
				if err != nil {
					continue
				}
				offer := &protocol.DelegationOffer{ID: protocol.NewDelegationID(), Profile: "echo", BudgetTokens: 16, HopLimit: 2,
					Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("flood")}}}
				c, err := protocol.Dial(s, id, b.PeerID(), offer, protocol.ConnOptions{IOTimeout: 5 * time.Second})
				if err == nil {
					m, err := c.Recv(5 * time.Second)
					if r, ok := m.(*protocol.DelegationReject); err == nil && ok && r.Reason == protocol.ReasonRateLimited {
						rateLimited.Add(1)
					} else {
						other.Add(1)
					}
				}
				_ = s.Reset()
			}
		}()
	}
	go func() { <-ctx.Done(); wg.Wait() }()
	return rateLimited, other
}

// A peer that floods offers is rate limited, and a well-behaved peer's
// delegations all complete meanwhile. The round trips with and without the
// flood are reported, not asserted (TESTING.md: no timing thresholds).
func TestFloodIsRateLimited(t *testing.T) {
	// The provider takes 30 offers per second from one peer: more than the
	// good peer makes (goodPace), far fewer than the flooder tries.
	b := startWith(t, func(c *config.Config) { c.Limits.OffersPerSecond, c.Limits.OfferBurst = 30, 15 })
	a, f := startWith(t, nil), startWith(t, nil)
	for _, n := range []*Node{a, f} {
		if err := connect(n, b); err != nil {
			t.Fatal(err)
		}
	}
	// The good peer is one b's user named; the flooder is a stranger, and
	// strangers share one slot of the pool between them.
	if err := b.Store().SetTrust(a.PeerID(), protocol.Verified, "test"); err != nil {
		t.Fatal(err)
	}
	fid := loadIdentity(t, f)
	quiet := goodRound(t, a, b, time.Second)

	// The flood lasts until it has been rate limited (a loaded machine
	// floods slower), and at most 15 s.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	limited, other := flood(ctx, f, fid, b, 8)
	loud := goodRound(t, a, b, time.Second)
	for limited.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()

	if limited.Load() == 0 {
		t.Fatalf("the flooder was never rate limited (%d other answers)", other.Load())
	}
	t.Logf("flood: %d offers rate_limited, %d refused otherwise (streams reset by the stream-rate limit, busy)", limited.Load(), other.Load())
	t.Logf("good peer round trip without flood: p50 %s p99 %s (%d delegations)", pct(quiet, .5), pct(quiet, .99), len(quiet))
	t.Logf("good peer round trip under flood:   p50 %s p99 %s (%d delegations); p99 ratio %.2fx",
		pct(loud, .5), pct(loud, .99), len(loud), float64(pct(loud, .99))/float64(pct(quiet, .99)))
}

// Streams that open and send nothing are closed by the stream deadline and
// do not keep others from being served.
func TestSlowLorisStreamsAreClosed(t *testing.T) {
	b := startWith(t, func(c *config.Config) { c.Limits.StreamIdleTimeout = config.Duration(500 * time.Millisecond) })
	a, f := startWith(t, nil), startWith(t, nil)
	for _, n := range []*Node{a, f} {
		if err := connect(n, b); err != nil {
			t.Fatal(err)
		}
	}
	// The good peer is one b's user named; the flooder is a stranger, and
	// strangers share one slot of the pool between them.
	if err := b.Store().SetTrust(a.PeerID(), protocol.Verified, "test"); err != nil {
		t.Fatal(err)
	}
	const idle = 40
	var streams []network.Stream
	for range idle {
		s, err := f.Host().NewStream(context.Background(), b.PeerID(), protocol.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Make the stream real on B's side without sending a whole frame.
		if _, err := s.Write([]byte{0x80}); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	// Others are served while the idle streams hang.
	if rts := goodRound(t, a, b, 300*time.Millisecond); len(rts) == 0 {
		t.Fatal("no delegation completed while idle streams were open")
	}
	// Every idle stream is closed by B once the deadline passes.
	for i, s := range streams {
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := s.Read(make([]byte, 1))
		if err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			t.Fatalf("idle stream %d was not closed by the provider: %v", i, err)
		}
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func loadIdentity(t *testing.T, n *Node) *crypto.Identity {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id
}
