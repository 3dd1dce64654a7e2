// Package store owns everything a kith node must remember across restarts,
// kept in one embedded badger database under $KITH_HOME:
//
//   - peers: addresses, how they were found, trust level and access
//     (allow/deny), with an append-only audit log of every trust, access and
//     delete decision;
//   - delegations on both sides (requester and provider), each with a
//     gap-free, strictly ordered event log, and the contexts that group them;
//   - the replay cache of envelope message IDs (it implements
//     crypto.ReplayCache);
//   - a schema version, and a small key-value space for later features.
//
// The API is typed; badger is an implementation detail and none of its types
// appear in exported signatures. Records are JSON documents of unexported
// structs with explicit field tags (see codec.go), under keys with fixed
// prefixes (see keys.go), so the on-disk format is stable and inspectable.
//
// # Durability
//
// By default every write is durable when the call returns: badger runs with
// SyncWrites, so a commit returns only after its logs have been synced.
// Badger's single writer goroutine takes all commits waiting at that moment
// and writes them as one batch (group commit), syncing the value log once
// per batch. In badger v4.9.6 it still syncs the memtable WAL once per
// transaction inside the batch (db.go writeRequests → writeToLSM →
// SyncWAL), so the sharing is partial: strace counts about 2 msyncs per
// commit for one writer and about 1.1–1.5 for 32 concurrent writers, and
// BenchmarkTransitionDurable (parallel) runs at roughly half the per-op
// cost of BenchmarkTransitionDurableSerial. A store-side coalescer over
// badger's DB.Sync would share the WAL flush too, but DB.Sync syncs only the
// active memtable's WAL: a write that landed in a memtable rotated out
// before the sync would be acknowledged unsynced. Durability wins.
//
// Options.NoSync turns syncing off for benchmarks and throwaway nodes; a
// machine crash may then lose the last writes, never corrupt older ones.
//
// # Concurrency
//
// Every method is safe for concurrent use. Writes that read and then modify a
// record (event sequence numbers, first-terminal-wins transitions, audit
// sequence numbers, the replay check) run in one badger transaction under an
// in-process lock on the record they change; badger's conflict detection, with
// a bounded retry, backs the lock up. Callbacks passed to Update* and
// Transition run inside that transaction, may run more than once, and must
// not call back into the Store.
package store
