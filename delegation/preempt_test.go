package delegation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// A remote delegation holding VRAM is preempted by the provider's local
// work; the requester hears `preempted` and re-offers the task to a second
// provider, which completes it.
func TestPreemptionReoffersElsewhere(t *testing.T) {
	block := newBlocking()
	t.Cleanup(block.Release)
	var ids []peer.ID
	nodes := newMesh(t, 3, func(i int, c *Config) {
		c.Finder = finderFunc(func() []peer.ID { return ids })
		if i == 0 {
			return
		}
		c.Ledger = gpu.NewLedger(gpu.Static(8000), 0, nil)
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "llm", MaxBudgetTokens: 100, VRAMMiB: 6000},
			Executor: executor.HandlerFunc(block.handle)})
	})
	a, b, c := nodes[0], nodes[1], nodes[2]
	ids = []peer.ID{b.id.PeerID(), c.id.PeerID()}

	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "llm", Peer: b.id.PeerID(), Task: textTask("q"), BudgetTokens: 50, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	// B's own work needs the GPU: A's lease is revoked.
	local, err := b.engine().Delegate(ctx, Request{Profile: "llm", Task: textTask("mine")})
	if err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 15*time.Second, "B's remote delegation preempted", func() bool {
		d, err := b.st.GetDelegation(store.RoleProvider, id)
		return err == nil && d.State == protocol.StatePreempted
	})
	labtest.WaitFor(t, 15*time.Second, "the task re-offered to C and running there", func() bool {
		d, err := c.st.GetDelegation(store.RoleProvider, id)
		return err == nil && d.State == protocol.StateRunning
	})
	block.Release()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(wctx, id)
	if err != nil || d.State != protocol.StateCompleted || d.Peer != c.id.PeerID() || Output(d) != "done: q" {
		t.Fatalf("requester: state %s reason %q peer %s output %q err %v", d.State, d.Reason, d.Peer, Output(d), err)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatalf("proof from the second provider: %v", err)
	}
	if ld, err := b.engine().Wait(wctx, local); err != nil || ld.State != protocol.StateCompleted {
		t.Fatalf("B's local work: %s %v", ld.State, err)
	}
	evs, _ := a.st.Events(store.RoleRequester, id, 0)
	sawReoffer := false
	for _, ev := range evs {
		sawReoffer = sawReoffer || ev.Type == EventReoffer
	}
	if !sawReoffer {
		t.Fatal("the requester's log does not record the re-offer")
	}
}

func TestInsufficientVRAMRejected(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Ledger = gpu.NewLedger(gpu.Static(4000), 0, nil)
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "big", MaxBudgetTokens: 100, VRAMMiB: 6000},
			Executor: executor.Echo{}})
	})
	d := delegateAndWait(t, nodes[0], Request{Profile: "big", Peer: nodes[1].id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
	if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, "insufficient_vram") {
		t.Fatalf("state %s reason %q, want rejected insufficient_vram", d.State, d.Reason)
	}
	// The requester learns the profile's need, not the provider's devices.
	if !strings.Contains(d.Reason, "6000 MiB") || strings.Contains(d.Reason, "4000") || strings.Contains(d.Reason, "headroom") {
		t.Fatalf("reason %q: want the profile's 6000 MiB and nothing of the provider's 4000 MiB device", d.Reason)
	}
}

// A provider whose NVML fails tells the requester nothing of the driver's
// error.
func TestVRAMRefusalHidesInventoryErrors(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Ledger = gpu.NewLedger(failingInventory{}, 0, nil)
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "big", MaxBudgetTokens: 100, VRAMMiB: 6000},
			Executor: executor.Echo{}})
	})
	d := delegateAndWait(t, nodes[0], Request{Profile: "big", Peer: nodes[1].id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
	if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, "insufficient_vram") {
		t.Fatalf("state %s reason %q, want rejected insufficient_vram", d.State, d.Reason)
	}
	if strings.Contains(d.Reason, "libnvidia") || strings.Contains(d.Reason, "driver") {
		t.Fatalf("reason %q carries the provider's NVML error", d.Reason)
	}
}

type failingInventory struct{}

func (failingInventory) Devices() ([]gpu.Device, error) {
	return nil, errors.New("NVML library libnvidia-ml.so.1 not found; is the NVIDIA driver installed?")
}

type finderFunc func() []peer.ID

func (f finderFunc) Candidates(context.Context, string) []peer.ID { return f() }
