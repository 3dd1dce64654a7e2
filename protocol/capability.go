package protocol

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// CapabilityQuery asks a provider what it offers (requester → provider).
type CapabilityQuery struct {
	Versions []Version // protocol versions the asker speaks
	Profiles []string  // profile names wanted; empty means all
}

// CapabilityResponse answers a CapabilityQuery (provider → requester) with
// a signed CapabilityAssertion. Check it with VerifyCapability.
type CapabilityResponse struct {
	Assertion crypto.Assertion
}

// CapabilityAssertion is what a provider signs about itself: the payload of
// a CapabilityResponse and of gossiped capability adverts.
type CapabilityAssertion struct {
	Provider     peer.ID
	Profiles     []Profile
	Capacity     Capacity
	Versions     []Version
	GrantedTrust TrustLevel // the trust the provider grants the asker
	IssuedAt     time.Time
	ExpiresAt    time.Time
	// MaxPayloadBytes (1.1) is the largest task and result output the
	// provider carries, in bytes of part content; 0, from a 1.0 peer, means
	// what fits in one frame (PayloadLimit).
	MaxPayloadBytes uint64
}

// PayloadLimit is the largest task a requester may offer this provider:
// what it advertises, and no more than this build carries; a 1.0 peer, which
// advertises nothing and cannot join chunks, gets what fits in one frame.
func (a *CapabilityAssertion) PayloadLimit() int {
	if a.MaxPayloadBytes == 0 {
		return ChunkSize - 64<<10 // leave room for the rest of the offer
	}
	return int(min(a.MaxPayloadBytes, MaxPayload))
}

// Profile is a named kind of work a provider offers.
type Profile struct {
	Name            string
	Description     string
	Skills          []string
	MaxBudgetTokens uint64 // offers above it are rejected budget_too_high
	VRAMMiB         uint64 // VRAM one delegation of this profile leases
}

// Capacity is a provider's load when it signed.
type Capacity struct {
	Active    uint32 // delegations running
	FreeSlots uint32 // further delegations it would accept now
}

func (*CapabilityQuery) Type() MessageType    { return TypeCapabilityQuery }
func (*CapabilityResponse) Type() MessageType { return TypeCapabilityResponse }

// CheckProfileName reports whether name may name a profile: 1 to
// MaxProfileNameLen bytes of UTF-8 with no spaces or control characters
// (names end up in logs, DHT keys and command lines). Config validation
// should use it too, so that no configured profile is unadvertisable.
func CheckProfileName(name string) error {
	return checkProfileName("profile", name)
}

func checkProfileName(field, name string) error {
	if name == "" {
		return invalid(field, "empty profile name")
	}
	if err := checkLen(field, name, MaxProfileNameLen); err != nil {
		return err
	}
	if !utf8.ValidString(name) {
		return invalid(field, "profile name is not UTF-8")
	}
	for _, r := range name {
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return invalid(field, "profile name %q has a space or control character", name)
		}
	}
	return nil
}

func (q *CapabilityQuery) check() error {
	if err := checkCount("versions", len(q.Versions), MaxVersions); err != nil {
		return err
	}
	if err := checkCount("profiles", len(q.Profiles), MaxProfiles); err != nil {
		return err
	}
	for i, p := range q.Profiles {
		if err := at("profiles", i, checkProfileName("", p)); err != nil {
			return err
		}
	}
	return nil
}

func (q *CapabilityQuery) toWire() (*pb.CapabilityQuery, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	return &pb.CapabilityQuery{Versions: versionsToWire(q.Versions), Profiles: q.Profiles}, nil
}

func capabilityQueryFromWire(w *pb.CapabilityQuery) (*CapabilityQuery, error) {
	vs, err := versionsFromWire("versions", w.GetVersions())
	if err != nil {
		return nil, err
	}
	q := &CapabilityQuery{Versions: vs}
	if ps := w.GetProfiles(); len(ps) > 0 {
		q.Profiles = ps
	}
	return q, q.check()
}

func (r *CapabilityResponse) check() error { return checkAssertion("assertion", r.Assertion) }

func (r *CapabilityResponse) toWire() (*pb.CapabilityResponse, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return &pb.CapabilityResponse{Assertion: assertionToWire(r.Assertion)}, nil
}

func capabilityResponseFromWire(w *pb.CapabilityResponse) (*CapabilityResponse, error) {
	r := &CapabilityResponse{Assertion: assertionFromWire(w.GetAssertion())}
	return r, r.check()
}

func (p *Profile) check() error {
	if err := checkProfileName("name", p.Name); err != nil {
		return err
	}
	if err := checkLen("description", p.Description, MaxDescriptionLen); err != nil {
		return err
	}
	if err := checkCount("skills", len(p.Skills), MaxSkills); err != nil {
		return err
	}
	for i, s := range p.Skills {
		if s == "" {
			return invalid(indexed("skills", i), "empty skill")
		}
		if err := at("skills", i, checkLen("", s, MaxSkillLen)); err != nil {
			return err
		}
	}
	return nil
}

func (a *CapabilityAssertion) check() error {
	if err := checkPeer("provider", a.Provider); err != nil {
		return err
	}
	if err := checkCount("profiles", len(a.Profiles), MaxProfiles); err != nil {
		return err
	}
	seen := make(map[string]bool, len(a.Profiles))
	for i := range a.Profiles {
		p := &a.Profiles[i]
		if err := at("profiles", i, p.check()); err != nil {
			return err
		}
		// Two profiles with one name would make offers ambiguous.
		if seen[p.Name] {
			return invalid(indexed("profiles", i), "duplicate profile name %q", p.Name)
		}
		seen[p.Name] = true
	}
	if len(a.Versions) == 0 {
		return invalid("versions", "none listed")
	}
	if err := checkCount("versions", len(a.Versions), MaxVersions); err != nil {
		return err
	}
	if err := checkTrust("granted_trust", a.GrantedTrust); err != nil {
		return err
	}
	// An assertion that never expires could be replayed forever.
	if a.IssuedAt.IsZero() || a.ExpiresAt.IsZero() {
		return invalid("expires_at", "issued_at and expires_at are required")
	}
	if !a.ExpiresAt.After(a.IssuedAt) {
		return invalid("expires_at", "%v is not after issued_at %v", a.ExpiresAt, a.IssuedAt)
	}
	return nil
}

func (a *CapabilityAssertion) toWire() (*pb.CapabilityAssertion, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	w := &pb.CapabilityAssertion{
		Provider:        []byte(a.Provider),
		Versions:        versionsToWire(a.Versions),
		GrantedTrust:    pb.TrustLevel(a.GrantedTrust),
		IssuedAtUnixMs:  timeToWire(a.IssuedAt),
		ExpiresAtUnixMs: timeToWire(a.ExpiresAt),
		MaxPayloadBytes: a.MaxPayloadBytes,
	}
	if a.Capacity != (Capacity{}) {
		w.Capacity = &pb.Capacity{Active: a.Capacity.Active, FreeSlots: a.Capacity.FreeSlots}
	}
	for _, p := range a.Profiles {
		w.Profiles = append(w.Profiles, &pb.Profile{
			Name:            p.Name,
			Description:     p.Description,
			Skills:          p.Skills,
			MaxBudgetTokens: p.MaxBudgetTokens,
			VramMib:         p.VRAMMiB,
		})
	}
	return w, nil
}

func capabilityAssertionFromWire(w *pb.CapabilityAssertion) (*CapabilityAssertion, error) {
	provider, err := peerFromWire("provider", w.GetProvider())
	if err != nil {
		return nil, err
	}
	versions, err := versionsFromWire("versions", w.GetVersions())
	if err != nil {
		return nil, err
	}
	trust, err := trustFromWire("granted_trust", w.GetGrantedTrust())
	if err != nil {
		return nil, err
	}
	a := &CapabilityAssertion{
		Provider:     provider,
		Versions:     versions,
		GrantedTrust: trust,
		Capacity:     Capacity{Active: w.GetCapacity().GetActive(), FreeSlots: w.GetCapacity().GetFreeSlots()},
		IssuedAt:     timeFromWire(w.GetIssuedAtUnixMs()),
		ExpiresAt:    timeFromWire(w.GetExpiresAtUnixMs()),

		MaxPayloadBytes: w.GetMaxPayloadBytes(),
	}
	ps := w.GetProfiles()
	if err := checkCount("profiles", len(ps), MaxProfiles); err != nil {
		return nil, err
	}
	if len(ps) > 0 {
		a.Profiles = make([]Profile, len(ps))
	}
	for i, p := range ps {
		a.Profiles[i] = Profile{
			Name:            p.GetName(),
			Description:     p.GetDescription(),
			MaxBudgetTokens: p.GetMaxBudgetTokens(),
			VRAMMiB:         p.GetVramMib(),
		}
		if s := p.GetSkills(); len(s) > 0 {
			a.Profiles[i].Skills = s
		}
	}
	return a, a.check()
}

// EncodeCapabilityAssertion encodes a as the payload that SignCapability
// signs.
func EncodeCapabilityAssertion(a CapabilityAssertion) ([]byte, error) {
	w, err := a.toWire()
	if err != nil {
		return nil, within("capability_assertion", err)
	}
	return marshal(w)
}

// DecodeCapabilityAssertion decodes a payload without checking any
// signature; use VerifyCapability for bytes from the network.
func DecodeCapabilityAssertion(b []byte) (CapabilityAssertion, error) {
	var w pb.CapabilityAssertion
	if err := unmarshal("capability_assertion", b, &w); err != nil {
		return CapabilityAssertion{}, err
	}
	a, err := capabilityAssertionFromWire(&w)
	if err != nil {
		return CapabilityAssertion{}, within("capability_assertion", err)
	}
	return *a, nil
}

// SignCapability encodes a and signs it with id under
// crypto.DomainCapabilityAssertion. An empty a.Provider is filled in with
// id's peer ID; any other peer is ErrPeerMismatch.
func SignCapability(id *crypto.Identity, a CapabilityAssertion) (crypto.Assertion, error) {
	if a.Provider == "" {
		a.Provider = id.PeerID()
	}
	if a.Provider != id.PeerID() {
		return crypto.Assertion{}, fmt.Errorf("%w: provider %s, signer %s", ErrPeerMismatch, a.Provider, id.PeerID())
	}
	payload, err := EncodeCapabilityAssertion(a)
	if err != nil {
		return crypto.Assertion{}, err
	}
	return id.SignAssertion(crypto.DomainCapabilityAssertion, payload), nil
}

// VerifyCapability checks that signer signed exactly a.Payload, decodes it,
// and checks that the assertion is about signer (ErrPeerMismatch) and has
// not expired at now (ErrExpired).
func VerifyCapability(signer peer.ID, a crypto.Assertion, now time.Time) (CapabilityAssertion, error) {
	if err := crypto.VerifyAssertion(signer, crypto.DomainCapabilityAssertion, a); err != nil {
		return CapabilityAssertion{}, fmt.Errorf("protocol: capability assertion from %s: %w", signer, err)
	}
	c, err := DecodeCapabilityAssertion(a.Payload)
	if err != nil {
		return CapabilityAssertion{}, err
	}
	if c.Provider != signer {
		return CapabilityAssertion{}, fmt.Errorf("%w: assertion about %s signed by %s", ErrPeerMismatch, c.Provider, signer)
	}
	if !now.Before(c.ExpiresAt) {
		return CapabilityAssertion{}, fmt.Errorf("%w: capability assertion from %s expired at %v", ErrExpired, signer, c.ExpiresAt)
	}
	return c, nil
}
