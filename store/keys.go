package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"

	"github.com/kithmesh/kith/protocol"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The key space. Every key starts with a fixed prefix naming its record kind,
// so a prefix scan never mixes kinds. Variable-length parts come last or are
// fixed-width (IDs in hex, sequence numbers as 8 big-endian bytes so that
// byte order is numeric order).
//
//	sys/schema                               schema version (8 bytes BE)
//	seq/audit                                last audit sequence number
//	seq/evt/<role>/<id hex>                  last event sequence number of a delegation
//	peer/<peer ID bytes>                     peerRecord
//	audit/<seq>                              auditRecord
//	dlg/<role>/<id hex>                      delegationRecord
//	blob/<role>/<id hex>/offer|result        Delegation.Offer, .Result (absent when empty)
//	evt/<role>/<id hex>/<seq>                eventRecord
//	idx/parent/<parent hex>/<role>/<id hex>  marker byte; roots are under the zero parent
//	idx/created/<unix ns>/<role>/<id hex>    marker byte; creation order for listing
//	ctx/<context ID>                         contextRecord
//	idx/ctxupd/<unix ns><context ID>         marker byte; requester contexts by update time
//	pctx/<peer len><peer><context ID>        PeerContext, binary (context.go)
//	idx/pctxupd/<unix ns><peer len><peer><context ID>  marker byte; provider contexts by update time
//	replay/<sender bytes><message ID 16 bytes>  expiry (8 bytes BE, unix ns)
//	meta/<key>                               opaque bytes (PutMeta)
//
// Peer IDs are raw multihash bytes, so key order is peer.ID's string order.
const (
	keySchema        = "sys/schema"
	keyAuditSeq      = "seq/audit"
	prefixEventSeq   = "seq/evt/"
	prefixPeer       = "peer/"
	prefixAudit      = "audit/"
	prefixDelegation = "dlg/"
	prefixBlob       = "blob/"
	blobOffer        = "offer"
	blobResult       = "result"
	prefixEvent      = "evt/"
	prefixIdxParent  = "idx/parent/"
	prefixIdxCreated = "idx/created/"
	prefixContext    = "ctx/"
	prefixReplay     = "replay/"
	prefixMeta       = "meta/"
	prefixCapability = "cap/"
	lockAudit        = "lock/audit" // in-process lock only; the audit log has one sequence
	hexIDLen         = 32
)

func be64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func peerKey(id peer.ID) []byte { return []byte(prefixPeer + string(id)) }

func auditKey(seq uint64) []byte { return append([]byte(prefixAudit), be64(seq)...) }

// dlgSuffix is "<role>/<id hex>", shared by every per-delegation key.
func dlgSuffix(role Role, id protocol.DelegationID) string {
	return string(appendDlgSuffix(nil, role, id))
}

// appendDlgSuffix appends dlgSuffix to b. The per-delegation keys are
// built with it in one allocation each: a delegation builds a few dozen.
func appendDlgSuffix(b []byte, role Role, id protocol.DelegationID) []byte {
	b = append(b, role.String()...)
	b = append(b, '/')
	return hex.AppendEncode(b, id[:])
}

// dlgKey is prefix, dlgSuffix and extra bytes of room.
func dlgKey(prefix string, role Role, id protocol.DelegationID, extra int) []byte {
	return appendDlgSuffix(append(make([]byte, 0, len(prefix)+len("requester/")+hexIDLen+extra), prefix...), role, id)
}

func delegationKey(role Role, id protocol.DelegationID) []byte {
	return dlgKey(prefixDelegation, role, id, 0)
}

func blobKey(role Role, id protocol.DelegationID, name string) []byte {
	return append(append(dlgKey(prefixBlob, role, id, 1+len(name)), '/'), name...)
}

func eventSeqKey(role Role, id protocol.DelegationID) []byte {
	return dlgKey(prefixEventSeq, role, id, 0)
}

func eventPrefix(role Role, id protocol.DelegationID) []byte {
	return append(dlgKey(prefixEvent, role, id, 1+8), '/')
}

func eventKey(role Role, id protocol.DelegationID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(eventPrefix(role, id), seq)
}

func parentIdxPrefix(parent protocol.DelegationID) []byte {
	return []byte(prefixIdxParent + parent.String() + "/")
}

func parentIdxKey(parent protocol.DelegationID, role Role, id protocol.DelegationID) []byte {
	return append(parentIdxPrefix(parent), dlgSuffix(role, id)...)
}

func createdIdxKey(createdNanos int64, role Role, id protocol.DelegationID) []byte {
	k := append([]byte(prefixIdxCreated), be64(uint64(createdNanos))...)
	return append(append(k, '/'), dlgSuffix(role, id)...)
}

// parseDlgSuffix reads the "<role>/<id hex>" that ends an index key. Role
// names hold no '/', so the role starts after the last '/' before the ID.
func parseDlgSuffix(key []byte) (Role, protocol.DelegationID, bool) {
	var role Role
	var id protocol.DelegationID
	if len(key) < hexIDLen+2 || key[len(key)-hexIDLen-1] != '/' {
		return 0, id, false
	}
	rest := key[:len(key)-hexIDLen-1]
	if role.UnmarshalText(rest[bytes.LastIndexByte(rest, '/')+1:]) != nil ||
		id.UnmarshalText(key[len(key)-hexIDLen:]) != nil {
		return 0, id, false
	}
	return role, id, true
}

func contextKey(id protocol.ContextID) []byte { return []byte(prefixContext + string(id)) }

func replayKey(sender peer.ID, id [16]byte) []byte {
	k := append([]byte(prefixReplay), sender...)
	return append(k, id[:]...)
}

func metaKey(key string) []byte { return []byte(prefixMeta + key) }

func capabilityKey(id peer.ID) []byte { return []byte(prefixCapability + string(id)) }
