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
// appear in exported signatures. On disk, offers and results of 256 KiB or
// more are kept in files of their own under blobs/, beside badger's
// files, each written and synced before the commit that refers to it
// (blobfile.go), outside the commit queue and, where the caller stages
// it, beside the caller's other work (stage.go); from 4 KiB up to 256 KiB
// they are appended to segment files under segments/, made durable by the
// commit log's record of the write, which carries the value (segment.go).
// Records are JSON documents of unexported
// structs with explicit field tags (see codec.go), under keys with fixed
// prefixes (see keys.go), so the on-disk format is stable and inspectable.
//
// # Durability
//
// By default every write is durable when the call returns. Badger runs
// without SyncWrites; the store writes each commit's writes to a log of its
// own first, one record per commit, synced with one write of whole blocks
// to a file whose blocks were all written before (commitlog.go), and only
// then commits them to badger. A write returns once its record is durable
// and badger has given it a commit timestamp; badger applies it after, and
// every transaction that starts later, read or write, waits for that (see
// wtxn.commit). Opening the store applies the log's records
// to badger again, so nothing badger had not yet synced when the machine
// went down is lost; a checkpoint (at open, and each time the log passes
// 4 MiB) syncs badger's files and starts the log over. Badger's own
// SyncWrites synced two files per commit (its value log and its memtable
// WAL, a sparse file whose new pages each cost a journal commit), and its
// DB.Sync reaches only the active memtable's WAL, not the ones rotated out
// and not yet flushed; the checkpoint syncs those too. The store does its
// own group commit on top (commit.go): the writes queued while one commit
// syncs all go into the next badger transaction and the next record, and
// share its one synced write. BenchmarkCommit (bench_test.go) measures the
// commit path beside a bare badger Set and Commit and a bare synced write.
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
