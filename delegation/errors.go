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
	// ErrTooLarge: the task is larger than this node, or the chosen
	// provider, carries (protocol.MaxPayload, or less where a store or a
	// peer holds less). Nothing was stored or sent.
	ErrTooLarge = errors.New("delegation: task too large")
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
	// ReasonProtocolViolation: the provider sent a message its state does
	// not allow (a result before its accept, a reject after it).
	ReasonProtocolViolation = "protocol_violation"
	// ReasonOutputViolation: the provider streamed more output than the
	// offered budget allows, or status frames faster than the cap.
	ReasonOutputViolation = "output_violation"
	// ReasonPayloadTooLarge: a task or result is larger than a side carries.
	ReasonPayloadTooLarge = "payload_too_large"
	// ReasonStore: this node could not write the delegation's record (disk
	// full, a value over the store's cap); retrying would not help.
	ReasonStore = "store_error"
	// ReasonExecutor: the profile's executor failed. Peers get this and a
	// short safe message; the detail stays in the provider's log and store.
	ReasonExecutor = "executor_failed"
	// ReasonInputUnsupported: an executor asked for input that its
	// requester cannot give (the offer was not multi_turn: a requester
	// older than protocol 1.3).
	ReasonInputUnsupported = "input_unsupported"
	// ReasonAnswerRefused: the provider refused this node's answer to its
	// question (it no longer waited for it), which ends the conversation.
	ReasonAnswerRefused = "answer_refused"
)
