package delegation

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

type parentKey struct{}

// withParent marks ctx as running task t, so that handlers can delegate
// children of it.
func withParent(ctx context.Context, t *task) context.Context {
	return context.WithValue(ctx, parentKey{}, t)
}

// ErrNoParent: DelegateChild was called outside a running delegation.
var ErrNoParent = errors.New("delegation: not inside a running delegation")

// DelegateChild delegates part of the work of the delegation that ctx runs
// (ctx is the one an executor's handler receives). The child carries the
// parent's chain plus this node and one hop less, and its budget is capped
// at the parent's: a task can never spend more by splitting itself.
func (e *requesterHalf) DelegateChild(ctx context.Context, req Request) (protocol.DelegationID, error) {
	t, ok := ctx.Value(parentKey{}).(*task)
	if !ok {
		return protocol.DelegationID{}, ErrNoParent
	}
	req.Parent = t.id
	req.Chain = append([]peer.ID(nil), t.offer.Chain...)
	if t.offer.HopLimit <= 1 {
		return protocol.DelegationID{}, &RejectedError{protocol.ReasonLoopDetected, "hop limit reached"}
	}
	req.HopLimit = t.offer.HopLimit - 1
	if req.BudgetTokens == 0 || req.BudgetTokens > t.offer.BudgetTokens {
		req.BudgetTokens = t.offer.BudgetTokens
	}
	if rem := t.deadline.Sub(e.cfg.Now()); req.Timeout <= 0 || req.Timeout > rem {
		if rem <= 0 {
			return protocol.DelegationID{}, fmt.Errorf("delegation: parent %s has no time left", t.id)
		}
		req.Timeout = rem
	}
	return e.Delegate(ctx, req)
}
