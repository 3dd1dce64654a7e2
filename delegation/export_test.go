package delegation

import "github.com/kithmesh/kith/protocol"

// SetMutateResult lets a test tamper with results after they are signed.
func (e *Engine) SetMutateResult(f func(*protocol.DelegationResult)) { e.mutateResult = f }
