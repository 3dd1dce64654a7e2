package plan

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
)

// BenchmarkPlanOverhead runs, in each iteration and on the same two-node
// mesh (coordinator A, echo provider B), a plan of 100 echo subtasks in a
// 10-wide DAG (ten chains of ten) and, as raw baselines, the same 100
// delegations made directly: all at once ("raw"), and in ten waves of ten,
// the DAG's shape without a coordinator ("waves"). It reports each
// time per iteration and the ratios plan/raw and plan/waves.
func BenchmarkPlanOverhead(b *testing.B) {
	const width, depth = 10, 10
	m := newMesh(b, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 1000}, Executor: executor.Echo{}}}
		}
		return nil
	})
	a, prov := m.nodes[0], m.nodes[1]
	var spec strings.Builder
	fmt.Fprintf(&spec, `{"budget": %d, "subtasks": [`, width*depth*100)
	for l := range depth {
		for i := range width {
			if l > 0 || i > 0 {
				spec.WriteString(",")
			}
			after := ""
			if l > 0 {
				after = fmt.Sprintf(`, "after": ["s%d_%d"]`, l-1, i)
			}
			fmt.Fprintf(&spec, `{"id": "s%d_%d", "profile": "echo", "task": "task: s%d_%d"%s}`, l, i, l, i, after)
		}
	}
	spec.WriteString("]}")
	ctx := context.Background()
	direct := func(n int) {
		ids := make([]protocol.DelegationID, 0, n)
		for i := range n {
			id, err := a.eng.Delegate(ctx, delegation.Request{Profile: "echo", Peer: prov.host.ID(), BudgetTokens: 100,
				Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(fmt.Sprintf("task: d%d", i))}}})
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			d, err := a.eng.Wait(ctx, id)
			if err != nil || d.State != protocol.StateCompleted {
				b.Fatalf("delegation %s: %s %v", id, d.State, err)
			}
		}
	}
	var planT, rawT, wavesT time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		direct(width * depth)
		t1 := time.Now()
		for range depth {
			direct(width)
		}
		t2 := time.Now()
		s, err := Parse("bench.json", []byte(spec.String()))
		if err != nil {
			b.Fatal(err)
		}
		id, err := a.coord().Start(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		v, err := a.coord().Wait(ctx, id)
		if err != nil || v.State != StateCompleted {
			b.Fatalf("plan: %s %s %v", v.State, v.Reason, err)
		}
		t3 := time.Now()
		rawT += t1.Sub(t0)
		wavesT += t2.Sub(t1)
		planT += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(planT.Nanoseconds())/n, "plan-ns/op")
	b.ReportMetric(float64(rawT.Nanoseconds())/n, "raw-ns/op")
	b.ReportMetric(float64(wavesT.Nanoseconds())/n, "waves-ns/op")
	b.ReportMetric(float64(planT)/float64(rawT), "plan/raw")
	b.ReportMetric(float64(planT)/float64(wavesT), "plan/waves")
}
