package gateway

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
)

// Agent card signatures (A2A v1.0, section 8.4): a JWS in flattened form
// whose payload is the card without "signatures", with fields at their
// protobuf default left out (empty strings and lists, false, zero), in
// JCS (RFC 8785) canonical form. The payload is detached: the card itself
// is it. kith signs with the node's Ed25519 identity (alg EdDSA) and sets
// kid to the peer ID, which embeds the public key, so the signature binds
// the card to a peer without any key directory; jku points at the node's
// JWKS for clients that want one.

// ErrBadSignature: a card's signature is missing, malformed or wrong.
var ErrBadSignature = errors.New("agent card signature does not verify")

type jwsHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ,omitempty"`
	Jku string `json:"jku,omitempty"`
}

// SignCard adds a signature by id to card, replacing any there.
func SignCard(card *a2a.AgentCard, id *crypto.Identity, jku string) error {
	card.Signatures = nil
	payload, err := CanonicalCard(card)
	if err != nil {
		return err
	}
	hdr, err := json.Marshal(jwsHeader{Alg: "EdDSA", Kid: id.PeerID().String(), Typ: "JOSE", Jku: jku})
	if err != nil {
		return err
	}
	protected := base64.RawURLEncoding.EncodeToString(hdr)
	sig, err := id.Libp2pKey().Sign([]byte(protected + "." + base64.RawURLEncoding.EncodeToString(payload)))
	if err != nil {
		return fmt.Errorf("gateway: sign card: %w", err)
	}
	card.Signatures = []a2a.AgentCardSignature{{Protected: protected, Signature: base64.RawURLEncoding.EncodeToString(sig)}}
	return nil
}

// VerifyCard checks a card's signatures and returns the peer that made the
// first valid EdDSA one (kid = peer ID). Signatures of other algorithms
// are skipped; a card with no valid kith signature is ErrBadSignature.
func VerifyCard(card *a2a.AgentCard) (peer.ID, error) {
	if len(card.Signatures) == 0 {
		return "", fmt.Errorf("%w: the card has no signatures", ErrBadSignature)
	}
	payload, err := CanonicalCard(card)
	if err != nil {
		return "", err
	}
	var problems []error
	for i, s := range card.Signatures {
		p, err := verifyOne(s, payload)
		if err == nil {
			return p, nil
		}
		problems = append(problems, fmt.Errorf("signatures[%d]: %w", i, err))
	}
	return "", fmt.Errorf("%w: %w", ErrBadSignature, errors.Join(problems...))
}

func verifyOne(s a2a.AgentCardSignature, payload []byte) (peer.ID, error) {
	hb, err := base64.RawURLEncoding.DecodeString(s.Protected)
	if err != nil {
		return "", fmt.Errorf("protected: %v", err)
	}
	var h jwsHeader
	if err := json.Unmarshal(hb, &h); err != nil {
		return "", fmt.Errorf("protected: %v", err)
	}
	if h.Alg != "EdDSA" {
		return "", fmt.Errorf("alg %q: want EdDSA", h.Alg)
	}
	p, err := peer.Decode(h.Kid)
	if err != nil {
		return "", fmt.Errorf("kid %q is not a peer ID: %v", h.Kid, err)
	}
	pub, err := crypto.Ed25519FromPeerID(p)
	if err != nil {
		return "", fmt.Errorf("kid: %v", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(s.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "", errors.New("signature: not a base64url Ed25519 signature")
	}
	if !ed25519.Verify(pub, []byte(s.Protected+"."+base64.RawURLEncoding.EncodeToString(payload)), sig) {
		return "", fmt.Errorf("signature by %s does not match the card", p)
	}
	return p, nil
}

// CanonicalCard is the signed payload of a card: its JSON without
// "signatures" and without default-valued fields, in JCS form.
func CanonicalCard(card *a2a.AgentCard) ([]byte, error) {
	c := *card
	c.Signatures = nil
	// The official JavaScript SDK (1.3.0) leaves the security fields out of
	// the payload it verifies (its canonical form drops them), so a card
	// that covered them would not verify there. They only tell a client
	// what to send; the listener enforces the token whatever a card says.
	c.SecuritySchemes, c.SecurityRequirements = nil, nil
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("gateway: card: %w", err)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := writeJCS(&out, dropDefaults(v)); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// dropDefaults removes what protobuf's JSON form leaves out: null, "",
// false, 0, empty lists and empty objects, recursively.
func dropDefaults(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			e = dropDefaults(e)
			if isDefault(e) {
				delete(x, k)
				continue
			}
			x[k] = e
		}
		return x
	case []any:
		for i := range x {
			x[i] = dropDefaults(x[i])
		}
		return x
	}
	return v
}

func isDefault(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case bool:
		return !x
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// writeJCS writes v in RFC 8785 form: object keys sorted by UTF-16 code
// units, no insignificant whitespace, minimal string escapes, numbers in
// ECMAScript form.
func writeJCS(w *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		w.WriteString("null")
	case bool:
		w.WriteString(strconv.FormatBool(x))
	case json.Number:
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("gateway: JCS: number %s", x)
		}
		w.WriteString(esNumber(f))
	case string:
		jcsString(w, x)
	case []any:
		w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := writeJCS(w, e); err != nil {
				return err
			}
		}
		w.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.WriteByte(',')
			}
			jcsString(w, k)
			w.WriteByte(':')
			if err := writeJCS(w, x[k]); err != nil {
				return err
			}
		}
		w.WriteByte('}')
	default:
		return fmt.Errorf("gateway: JCS: unexpected %T", v)
	}
	return nil
}

func jcsString(w *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	w.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			w.WriteString(`\"`)
		case r == '\\':
			w.WriteString(`\\`)
		case r == '\b':
			w.WriteString(`\b`)
		case r == '\f':
			w.WriteString(`\f`)
		case r == '\n':
			w.WriteString(`\n`)
		case r == '\r':
			w.WriteString(`\r`)
		case r == '\t':
			w.WriteString(`\t`)
		case r < 0x20:
			w.WriteString(`\u00`)
			w.WriteByte(hex[r>>4])
			w.WriteByte(hex[r&0xf])
		case r == utf8.RuneError:
			w.WriteRune(r)
		default:
			w.WriteRune(r)
		}
	}
	w.WriteByte('"')
}

// esNumber formats f as ECMAScript's Number.prototype.toString does, for
// the values a card holds (integers, and rarely fractions).
func esNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func compareUTF16(a, b string) int {
	ua, ub := utf16Units(a), utf16Units(b)
	return slices.Compare(ua, ub)
}

func utf16Units(s string) []uint16 {
	out := make([]uint16, 0, len(s))
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xd800+(r>>10)), uint16(0xdc00+(r&0x3ff)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}
