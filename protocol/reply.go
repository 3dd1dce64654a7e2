package protocol

import (
	"github.com/kithmesh/kith/protocol/pb"
)

// DelegationAccept tells the requester that the provider took the
// delegation (provider → requester).
type DelegationAccept struct {
	ID             DelegationID
	ProviderHandle string // the provider's own name for it, for logs and support
	Lease          Lease
}

// Lease is the VRAM granted to a delegation; zero when none was needed.
type Lease struct {
	VRAMMiB uint64
	Device  string // e.g. "GPU-<uuid>"
}

// DelegationReject refuses an offer with the reason of the admission rule
// that refused it (provider → requester).
type DelegationReject struct {
	ID     DelegationID
	Reason RejectReason // never ReasonUnspecified: a refusal always says why
	Detail string       // human-readable, for logs; never parsed
}

// DelegationCancel withdraws a delegation (requester → provider).
type DelegationCancel struct {
	ID     DelegationID
	Reason string
}

func (*DelegationAccept) Type() MessageType { return TypeDelegationAccept }
func (*DelegationReject) Type() MessageType { return TypeDelegationReject }
func (*DelegationCancel) Type() MessageType { return TypeDelegationCancel }

func (a *DelegationAccept) check() error {
	if err := checkDelegationID("delegation_id", a.ID); err != nil {
		return err
	}
	if err := checkLen("provider_handle", a.ProviderHandle, MaxHandleLen); err != nil {
		return err
	}
	return checkLen("lease.device", a.Lease.Device, MaxDeviceLen)
}

func (a *DelegationAccept) toWire() (*pb.DelegationAccept, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	w := &pb.DelegationAccept{DelegationId: a.ID[:], ProviderHandle: a.ProviderHandle}
	if a.Lease != (Lease{}) {
		w.Lease = &pb.Lease{VramMib: a.Lease.VRAMMiB, Device: a.Lease.Device}
	}
	return w, nil
}

func delegationAcceptFromWire(w *pb.DelegationAccept) (*DelegationAccept, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	a := &DelegationAccept{
		ID:             id,
		ProviderHandle: w.GetProviderHandle(),
		Lease:          Lease{VRAMMiB: w.GetLease().GetVramMib(), Device: w.GetLease().GetDevice()},
	}
	return a, a.check()
}

func (r *DelegationReject) check() error {
	if err := checkDelegationID("delegation_id", r.ID); err != nil {
		return err
	}
	if err := checkReason("reason", r.Reason); err != nil {
		return err
	}
	if r.Reason == ReasonUnspecified {
		return invalid("reason", "unspecified: a rejection must say which rule refused")
	}
	return checkLen("detail", r.Detail, MaxReasonLen)
}

func (r *DelegationReject) toWire() (*pb.DelegationReject, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return &pb.DelegationReject{DelegationId: r.ID[:], Reason: pb.RejectReason(r.Reason), Detail: r.Detail}, nil
}

func delegationRejectFromWire(w *pb.DelegationReject) (*DelegationReject, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	reason, err := reasonFromWire("reason", w.GetReason())
	if err != nil {
		return nil, err
	}
	r := &DelegationReject{ID: id, Reason: reason, Detail: w.GetDetail()}
	return r, r.check()
}

func (c *DelegationCancel) check() error {
	if err := checkDelegationID("delegation_id", c.ID); err != nil {
		return err
	}
	return checkLen("reason", c.Reason, MaxReasonLen)
}

func (c *DelegationCancel) toWire() (*pb.DelegationCancel, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return &pb.DelegationCancel{DelegationId: c.ID[:], Reason: c.Reason}, nil
}

func delegationCancelFromWire(w *pb.DelegationCancel) (*DelegationCancel, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	c := &DelegationCancel{ID: id, Reason: w.GetReason()}
	return c, c.check()
}
