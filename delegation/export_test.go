package delegation

import (
	"time"

	"github.com/kithmesh/kith/protocol"
)

// SetMutateResult lets a test tamper with results after they are signed.
func (e *Engine) SetMutateResult(f func(*protocol.DelegationResult)) { e.mutateResult = f }

// SetOpenDelay sets how long a remote task may run before it is stored.
func (e *Engine) SetOpenDelay(d time.Duration) { e.openDelay = d }
