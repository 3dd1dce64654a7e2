package protocol

import "fmt"

// Limits on what one message may carry. Decoders reject anything above
// them with ErrMalformed, and encoders refuse to produce it, so a value that
// encodes here decodes on every peer of the same version. Strings are
// counted in bytes.
//
// Raising a limit is a compatible change only for the side that receives;
// lowering one can break old senders. Either is a protocol change: note it
// in the history in doc.go.
const (
	MaxVersions         = 16   // versions in a query or an assertion
	MaxProfiles         = 64   // profiles in an assertion, or wanted by a query
	MaxProfileNameLen   = 64   // a profile name
	MaxDescriptionLen   = 1024 // a profile's description
	MaxSkills           = 64   // skills of one profile
	MaxSkillLen         = 64   // one skill
	MaxParts            = 256  // parts of a task, a status or a result
	MaxRoleLen          = 32   // a task's A2A role
	MaxFileNameLen      = 255  // a file part's name
	MaxMediaTypeLen     = 255  // a file part's media type
	MaxURILen           = 2048 // a file part's URI
	MaxChain            = 32   // peers in an offer's chain
	MaxHopLimit         = MaxChain
	MaxPeerIDLen        = 64  // bytes of a peer ID; Ed25519 IDs take 38
	MaxHandleLen        = 128 // a provider's delegation handle
	MaxDeviceLen        = 128 // a lease's device name
	MaxReasonLen        = 1024
	MaxProgressPermille = 1000
	// MaxTurns bounds a multi-turn delegation (1.3): the first offer and
	// its continuations together.
	MaxTurns = 64
)

// Payload limits. A task, a result's output, and all the partial output of
// one delegation together are each at most MaxPayload bytes of part content
// (PayloadSize). A message whose encoding is larger than ChunkSize travels
// as consecutive chunk frames (protocol 1.1), so no frame is larger than
// about ChunkSize whatever the payload, and a receiver holds at most
// MaxMessage bytes of one message while it joins the chunks.
const (
	MaxPayload = 64 << 20
	ChunkSize  = 1 << 20
	MaxMessage = MaxPayload + ChunkSize // the payload plus room for the rest of the message
)

// PayloadSize is the content size of parts as MaxPayload counts it: text,
// data and inline file bytes.
func PayloadSize(parts []Part) int {
	n := 0
	for i := range parts {
		n += len(parts[i].Text) + len(parts[i].Data) + len(parts[i].File.Bytes)
	}
	return n
}

func checkPayload(name string, parts []Part) error {
	if n := PayloadSize(parts); n > MaxPayload {
		return &fieldError{path: name, err: fmt.Errorf("%w: %d bytes of content, limit %d", ErrPayloadTooLarge, n, MaxPayload)}
	}
	return nil
}
