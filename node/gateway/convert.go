package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
)

// taskState maps a delegation state to an A2A task state. Offered is
// submitted; accepted and running are working; expired and preempted (a
// provider took its GPU back and nobody else ran it) are failures.
func taskState(s protocol.State) a2a.TaskState {
	switch s {
	case protocol.StateOffered:
		return a2a.TaskStateSubmitted
	case protocol.StateAccepted, protocol.StateRunning:
		return a2a.TaskStateWorking
	case protocol.StateInputRequired:
		return a2a.TaskStateInputRequired
	case protocol.StateCompleted:
		return a2a.TaskStateCompleted
	case protocol.StateCancelled:
		return a2a.TaskStateCanceled
	case protocol.StateRejected:
		return a2a.TaskStateRejected
	case protocol.StateFailed, protocol.StateExpired, protocol.StatePreempted:
		return a2a.TaskStateFailed
	}
	return a2a.TaskStateUnspecified
}

// Limits on what one A2A message may carry into an offer.
const (
	maxParts = 64
)

// partsFromA2A converts a message's parts to the offer's, checking each at
// its path ("message.parts[2].data").
func partsFromA2A(parts a2a.ContentParts) ([]protocol.Part, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("message.parts: empty; want at least one text, data or file part")
	}
	if len(parts) > maxParts {
		return nil, fmt.Errorf("message.parts: %d parts; at most %d", len(parts), maxParts)
	}
	out := make([]protocol.Part, 0, len(parts))
	for i, p := range parts {
		path := fmt.Sprintf("message.parts[%d]", i)
		if p == nil {
			return nil, fmt.Errorf("%s: null", path)
		}
		switch c := p.Content.(type) {
		case a2a.Text:
			out = append(out, protocol.TextPart(string(c)))
		case a2a.Data:
			b, err := json.Marshal(c.Value)
			if err != nil || len(b) == 0 || b[0] != '{' {
				return nil, fmt.Errorf("%s.data: want a JSON object", path)
			}
			out = append(out, protocol.DataPart(b))
		case a2a.Raw:
			out = append(out, protocol.Part{Kind: protocol.PartFile, File: protocol.File{Name: p.Filename, MediaType: p.MediaType, Bytes: []byte(c)}})
		case a2a.URL:
			out = append(out, protocol.Part{Kind: protocol.PartFile, File: protocol.File{Name: p.Filename, MediaType: p.MediaType, URI: string(c)}})
		default:
			return nil, fmt.Errorf("%s: no content", path)
		}
	}
	return out, nil
}

// partsToA2A converts output parts for an artifact or a message.
func partsToA2A(parts []protocol.Part) a2a.ContentParts {
	out := make(a2a.ContentParts, 0, len(parts))
	for _, p := range parts {
		switch p.Kind {
		case protocol.PartText:
			out = append(out, a2a.NewTextPart(p.Text))
		case protocol.PartData:
			var v map[string]any
			if json.Unmarshal(p.Data, &v) == nil {
				out = append(out, a2a.NewDataPart(v))
			}
		case protocol.PartFile:
			var ap *a2a.Part
			if p.File.URI != "" {
				ap = a2a.NewFileURLPart(a2a.URL(p.File.URI), p.File.MediaType)
			} else {
				ap = a2a.NewRawPart(p.File.Bytes)
				ap.MediaType = p.File.MediaType
			}
			ap.Filename = p.File.Name
			out = append(out, ap)
		}
	}
	return out
}

// splitReason splits a stored reason ("budget_too_high: budget 9 above
// ...") into kith's typed reason and the detail; a reason without a known
// prefix is all detail.
func splitReason(s string) (reason, detail string) {
	head, tail, ok := strings.Cut(s, ": ")
	if ok && isTypedReason(head) {
		return head, tail
	}
	if isTypedReason(s) {
		return s, ""
	}
	return "", s
}

func isTypedReason(s string) bool {
	var r protocol.RejectReason
	if r.UnmarshalText([]byte(s)) == nil && r != protocol.ReasonUnspecified {
		return true
	}
	switch s {
	case delegation.ReasonProviderRestarted, delegation.ReasonProviderShutdown, delegation.ReasonRequesterRestarted,
		delegation.ReasonBudgetViolation, delegation.ReasonProofInvalid, delegation.ReasonTimeout, delegation.ReasonUnreachable:
		return true
	}
	return false
}

// rejectionError maps kith's typed rejection reason to the A2A error a
// client can act on, with the reason in the error's data.
func rejectionError(taskID a2a.TaskID, reason, detail string) error {
	base := a2a.ErrServerError
	switch reason {
	case "budget_too_low", "budget_too_high", "no_matching_profile", "loop_detected", "expired":
		base = a2a.ErrInvalidParams
	case "not_allowed":
		base = a2a.ErrUnauthorized
	case "version_unsupported":
		base = a2a.ErrVersionNotSupported
	}
	msg := "delegation rejected: " + reason
	if detail != "" {
		msg += ": " + detail
	}
	data := map[string]any{"reason": reason, "detail": detail}
	if taskID != "" {
		data["taskId"] = string(taskID)
	}
	return a2a.NewError(base, msg).WithDetails(data)
}

// engineError maps an error of Engine.Delegate to an A2A error.
func engineError(err error) error {
	var rej *delegation.RejectedError
	switch {
	case errors.As(err, &rej):
		return rejectionError("", rej.Reason.String(), rej.Detail)
	case errors.Is(err, delegation.ErrBadRequest):
		return a2a.NewError(a2a.ErrInvalidParams, err.Error())
	case errors.Is(err, delegation.ErrNoProvider):
		return rejectionError("", "no_matching_profile", err.Error())
	case errors.Is(err, delegation.ErrNotRunning):
		return a2a.NewError(a2a.ErrServerError, "the node is stopping")
	}
	return a2a.NewError(a2a.ErrInternalError, err.Error())
}
