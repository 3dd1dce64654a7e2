package protocol

import (
	"errors"
	"fmt"

	"github.com/kithmesh/kith/protocol/pb"
)

// Message is one of the eight message types of /kith/delegate/1.0.0:
// *CapabilityQuery, *CapabilityResponse, *DelegationOffer,
// *DelegationAccept, *DelegationReject, *DelegationStatus,
// *DelegationResult or *DelegationCancel, and *DelegationContinue (1.3),
// which travels as a delegation_offer. Only pointers satisfy it, so a type
// switch over a decoded Message has exactly one case per kind.
type Message interface {
	// Type is the message's type; the envelope header carries it for the
	// first message of a stream.
	Type() MessageType
	// check validates the value against the wire limits.
	check() error
}

// EncodeMessage encodes m as the plaintext of one sealed frame. It refuses
// (with ErrMalformed) any value that DecodeMessage would refuse. The output
// is deterministic for a given value and protocol version.
func EncodeMessage(m Message) ([]byte, error) {
	w, err := messageToWire(m)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

// DecodeMessage decodes the plaintext of one sealed frame. Every failure
// matches ErrMalformed; a body of a type this version does not know also
// matches ErrUnknownEnum.
func DecodeMessage(b []byte) (Message, error) {
	var w pb.Message
	if err := unmarshal("message", b, &w); err != nil {
		return nil, err
	}
	return messageFromWire(&w)
}

// DecodeMessageInPlace is DecodeMessage for a b that nothing changes
// afterwards: the message's texts of 64 KiB or more are strings over b's
// memory instead of copies of it (alias.go). It decodes and refuses
// exactly what DecodeMessage does.
func DecodeMessageInPlace(b []byte) (Message, error) {
	var w pb.Message
	if err := aliasUnmarshal("message", b, &w); err != nil {
		return nil, err
	}
	return messageFromWire(&w)
}

// errNilMessage: an encoder was handed a nil Message or a typed nil pointer.
var errNilMessage = errors.New("nil message")

// messageToWire wraps m's wire form in the Message oneof. Each case checks
// for a typed nil pointer, which would otherwise satisfy Message.
func messageToWire(m Message) (*pb.Message, error) {
	if m == nil {
		return nil, &fieldError{path: "message", err: errNilMessage}
	}
	name := m.Type().String()
	nilErr := &fieldError{path: name, err: errNilMessage}
	switch m := m.(type) {
	case *CapabilityQuery:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_CapabilityQuery{CapabilityQuery: w}}, nil
	case *CapabilityResponse:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_CapabilityResponse{CapabilityResponse: w}}, nil
	case *DelegationOffer:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationOffer{DelegationOffer: w}}, nil
	case *DelegationContinue:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationOffer{DelegationOffer: w}}, nil
	case *DelegationAccept:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationAccept{DelegationAccept: w}}, nil
	case *DelegationReject:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationReject{DelegationReject: w}}, nil
	case *DelegationStatus:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationStatus{DelegationStatus: w}}, nil
	case *DelegationResult:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationResult{DelegationResult: w}}, nil
	case *DelegationCancel:
		if m == nil {
			return nil, nilErr
		}
		w, err := m.toWire()
		if err != nil {
			return nil, within(name, err)
		}
		return &pb.Message{Body: &pb.Message_DelegationCancel{DelegationCancel: w}}, nil
	}
	// Unreachable: check() is unexported, so only this package's types
	// satisfy Message, and the switch names them all.
	return nil, &fieldError{path: "message", err: fmt.Errorf("%w: %T", ErrUnknownEnum, m)}
}

// messageFromWire converts the one body that w carries. A Message with no
// body it knows but with unknown fields is most likely a message type from a
// newer minor version: that is ErrUnknownEnum rather than plain garbage.
func messageFromWire(w *pb.Message) (Message, error) {
	var m Message
	var err error
	switch b := w.GetBody().(type) {
	case *pb.Message_CapabilityQuery:
		m, err = capabilityQueryFromWire(b.CapabilityQuery)
		err = within("capability_query", err)
	case *pb.Message_CapabilityResponse:
		m, err = capabilityResponseFromWire(b.CapabilityResponse)
		err = within("capability_response", err)
	case *pb.Message_DelegationOffer:
		if b.DelegationOffer.GetTurn() != 0 {
			m, err = delegationContinueFromWire(b.DelegationOffer)
		} else {
			m, err = delegationOfferFromWire(b.DelegationOffer)
		}
		err = within("delegation_offer", err)
	case *pb.Message_DelegationAccept:
		m, err = delegationAcceptFromWire(b.DelegationAccept)
		err = within("delegation_accept", err)
	case *pb.Message_DelegationReject:
		m, err = delegationRejectFromWire(b.DelegationReject)
		err = within("delegation_reject", err)
	case *pb.Message_DelegationStatus:
		m, err = delegationStatusFromWire(b.DelegationStatus)
		err = within("delegation_status", err)
	case *pb.Message_DelegationResult:
		m, err = delegationResultFromWire(b.DelegationResult)
		err = within("delegation_result", err)
	case *pb.Message_DelegationCancel:
		m, err = delegationCancelFromWire(b.DelegationCancel)
		err = within("delegation_cancel", err)
	case *pb.Message_Chunk:
		// Chunks are joined by Conn before decoding; one on its own is
		// framing out of place.
		return nil, invalid("chunk", "a chunk is a piece of a message, not a message")
	default:
		if len(w.ProtoReflect().GetUnknown()) > 0 {
			return nil, &fieldError{path: "message", err: fmt.Errorf("%w: message type not known to this version", ErrUnknownEnum)}
		}
		return nil, invalid("message", "no body")
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}
