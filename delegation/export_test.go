package delegation

import (
	"time"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// SetMutateResult lets a test tamper with results after they are signed.
func (e *Engine) SetMutateResult(f func(*protocol.DelegationResult)) { e.mutateResult = f }

// SetOpenDelay sets how long a remote task may run before it is stored.
func (e *Engine) SetOpenDelay(d time.Duration) { e.openDelay = d }

// SetStatusCap sets the most output one status of the provider carries.
func (e *Engine) SetStatusCap(n int) { e.statusCap = n }

// SetDigest sets the proof digest the engine asks for and agrees to.
func (e *Engine) SetDigest(d protocol.ProofDigest) { e.digest = d }

// SetVersions sets the protocol versions the provider's capability
// assertion lists (an older peer lists fewer).
func (e *Engine) SetVersions(vs []protocol.Version) { e.versions = vs }

// SetKeptAnswerTimeout sets how long a requester waits for the first answer
// to an offer sent on a kept stream.
func (e *Engine) SetKeptAnswerTimeout(d time.Duration) { e.keptWait = d }

// SetBeforeMergedWrite sets a function the provider runs before a fast
// task's one write, after a provisional result went out.
func (e *Engine) SetBeforeMergedWrite(f func()) { e.beforeMergedWrite = f }

// SetBeforeCreate sets a function the requester runs before a new
// delegation's record is written, after its offer went out, with the
// record as it will be written; its error fails the write.
func (e *Engine) SetBeforeCreate(f func(store.Delegation) error) { e.beforeCreate = f }

// SetCreateDelay sets how long Delegate waits for a fast provider's answer
// before it writes the record alone.
func (e *Engine) SetCreateDelay(d time.Duration) { e.createDelay = d }
