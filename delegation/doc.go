// Package delegation owns the delegation state machine on both sides of the
// wire: the requester that offers a task and the provider that runs it, the
// admission checks in front of a provider's executors, token budgets, hop
// limits, result proofs, and reattaching after a lost stream or a restart.
//
// Every transition is written to the store before it is acknowledged on the
// wire or to a caller, so a restart on either side loses nothing: a provider
// that restarts fails its in-flight delegations with reason
// provider_restarted (and keeps every finished result for its requester),
// and a requester that restarts reattaches to the delegations it left open.
// Each side makes one durable write on a delegation's critical path: the
// provider stores a task that ends within openDelay once, accept and result
// together (a task it had not yet stored when it crashed is run again when
// the requester re-offers it), and the requester stores its record while
// the offer travels and the provider's messages with the result, or, on a
// store that syncs, when the provider answered its last offer for the
// profile within createDelay, its record with the result in one write if
// the result comes that soon (Delegate returns once it is durable). A live
// delegation's log is kept in memory as well, so signing and checking a
// result proof read nothing back from the store.
//
// The Engine is a provider half (provider*.go, local.go) and a requester
// half (requester*.go, capability.go, child.go) over a core they share
// (engine.go, query.go: the store, the identity, metrics, subscriptions and
// the run context); each half's state has its own lock.
//
// A requester trusts a provider's signature, not its conduct: it refuses
// messages its state does not allow (a result before an accept), output
// beyond what the offered budget allows, and status floods, ending the
// delegation with a typed reason and telling the provider to stop. Tasks
// and results carry up to protocol.MaxPayload (less where the store holds
// less); a larger task is refused by Delegate before anything is stored.
//
// Multi-turn delegations (turns.go, protocol 1.3): an executor's question
// pauses a task in input_required, holding no slot or lease, until
// Engine.Reply's answer continues it on the same provider, within the
// first offer's deadline and budget; the proof covers every turn.
//
// Local profiles run through the same state machine and store with no
// network: the engine is its own provider.
package delegation
