package delegation

import (
	"strings"
	"testing"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

func TestReproLarge(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Profiles[0].MaxBudgetTokens = 1 << 22
	})
	text := strings.Repeat("word ", (1<<20)/5)
	fails := 0
	dump := func(n *testNode, role store.Role, id protocol.DelegationID) {
		evs, _ := n.st.Events(role, id, 0)
		for _, ev := range evs {
			seq := uint64(0)
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				if s, ok := m.(*protocol.DelegationStatus); ok {
					seq = s.Seq
				}
			}
			t.Logf("  %s %d %s %s len=%d sseq=%d", role, ev.Seq, ev.Type, ev.State, len(ev.Data), seq)
		}
	}
	for i := 0; i < 20; i++ {
		d := delegateAndWait(t, nodes[0], Request{Profile: "echo", Peer: nodes[1].id.PeerID(), Task: textTask(text), BudgetTokens: 1 << 22})
		if d.State != protocol.StateCompleted {
			fails++
			t.Logf("%d: %s %s", i, d.State, d.Reason)
			dump(nodes[0], store.RoleRequester, d.ID)
			dump(nodes[1], store.RoleProvider, d.ID)
		}
	}
	t.Logf("fails %d", fails)
}
