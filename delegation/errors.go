package delegation

import (
	"errors"
	"fmt"

	"github.com/kithmesh/kith/protocol"
)

// Errors a caller of the engine can test with errors.Is.
var (
	ErrNoProvider   = errors.New("delegation: no provider offers this profile")
	ErrUnknown      = errors.New("delegation: unknown delegation")
	ErrNotRunning   = errors.New("delegation: engine is not running")
	ErrBadRequest   = errors.New("delegation: invalid request")
	ErrProofInvalid = errors.New("delegation: result proof does not verify")
)

// RejectedError is a provider's typed refusal of an offer.
type RejectedError struct {
	Reason protocol.RejectReason
	Detail string
}

func (e *RejectedError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("delegation rejected: %s", e.Reason)
	}
	return fmt.Sprintf("delegation rejected: %s: %s", e.Reason, e.Detail)
}

// Reasons recorded on delegations that did not come from the wire.
const (
	ReasonProviderRestarted  = "provider_restarted"
	ReasonProviderShutdown   = "provider_shutdown"
	ReasonRequesterRestarted = "requester_restarted"
	ReasonBudgetViolation    = "budget_violation"
	ReasonProofInvalid       = "proof_invalid"
	ReasonTimeout            = "timeout"
	ReasonUnreachable        = "provider_unreachable"
)
