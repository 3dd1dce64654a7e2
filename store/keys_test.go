package store

import (
	"testing"

	"github.com/kithmesh/kith/protocol"
)

// TestDelegationKeysLayout pins the on-disk form of the per-delegation
// keys: a store written by any version must be read by the next, so a
// change here is a schema change (schema.go), never a refactor.
func TestDelegationKeysLayout(t *testing.T) {
	var id protocol.DelegationID
	for i := range id {
		id[i] = byte(0xa0 + i)
	}
	const hexID = "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
	for _, c := range []struct{ got, want string }{
		{string(delegationKey(RoleRequester, id)), "dlg/requester/" + hexID},
		{string(delegationKey(RoleProvider, id)), "dlg/provider/" + hexID},
		{string(blobKey(RoleProvider, id, blobOffer)), "blob/provider/" + hexID + "/" + blobOffer},
		{string(eventSeqKey(RoleRequester, id)), "seq/evt/requester/" + hexID},
		{string(eventPrefix(RoleRequester, id)), "evt/requester/" + hexID + "/"},
		{string(eventKey(RoleProvider, id, 0x0102)), "evt/provider/" + hexID + "/\x00\x00\x00\x00\x00\x00\x01\x02"},
		{dlgSuffix(RoleProvider, id), "provider/" + hexID},
	} {
		if c.got != c.want {
			t.Errorf("key %q, want %q", c.got, c.want)
		}
	}
}
