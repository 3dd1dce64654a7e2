package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Group commit. Every write of the store is a function over a badger
// transaction (update). Writers queue their functions; the writer at the
// head of the queue leads: it runs every function queued at that moment in
// one badger transaction, writes the batch's writes to the commit log as
// one record (commitlog.go), and commits the transaction, so that one
// synced write makes all of them durable.
// While the leader syncs, new writers queue up behind it, and the first of
// them leads the next batch: the batch grows with the load by itself, and a
// lone writer commits at once, without waiting for company and without a
// goroutine hand-off.
//
// Merging the writes into one transaction also saves badger's
// per-transaction bookkeeping. BenchmarkCommit in bench_test.go measures
// the commit path beside a bare badger Set and Commit and a bare synced
// write of one block.
//
// Writers of one record hold its key lock (keyLocks) until their batch has
// committed, so a batch never holds two writers of the same record, and a
// later batch reads what an earlier one wrote. A function that fails is
// dropped from its batch: the functions before it commit without it (they
// run again in a fresh transaction, which they allow: update's contract),
// and it runs again at the head of the next batch, alone in a fresh
// transaction, where its error is its own.

// maxBatchOps bounds the functions of one batch, so that one transaction
// stays well under badger's limits even when every function writes a few
// keys.
const maxBatchOps = 128

type commitOp struct {
	fn   func(txn *wtxn) error
	err  error
	wake chan struct{} // receives once: the op is done, or its writer leads
	lead bool          // set before wake: this writer leads the next batch
}

type committer struct {
	mu      sync.Mutex
	queue   []*commitOp
	leading bool // a writer is running a batch

	// log is the durable store's commit log; nil in memory and with
	// NoSync, where badger's commit is the whole write.
	log *commitLog
}

// quiet reports whether no batch is being committed and none waits.
func (c *committer) quiet() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.leading && len(c.queue) == 0
}

// do runs fn in a batch and returns its own error once the batch that
// carried it has committed (or failed to).
func (c *committer) do(db *badger.DB, fn func(txn *wtxn) error) error {
	op := &commitOp{fn: fn, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, op)
	if c.leading {
		c.mu.Unlock()
		<-op.wake
		if !op.lead {
			return op.err
		}
	} else {
		c.leading = true
		c.mu.Unlock()
	}
	// This writer leads: its op heads the queue.
	c.mu.Lock()
	n := min(len(c.queue), maxBatchOps)
	batch := c.queue[:n:n]
	c.queue = c.queue[n:]
	c.mu.Unlock()

	commitBatch(db, c.log, batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		next := c.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		c.leading = false
		c.queue = nil // let the old backing array go
	}
	c.mu.Unlock()
	for _, o := range batch {
		if o != op {
			o.wake <- struct{}{}
		}
	}
	return op.err
}

// commitBatch runs and commits ops, setting each one's err; with a log, it
// checkpoints once the log is full.
func commitBatch(db *badger.DB, log *commitLog, ops []*commitOp) {
	for len(ops) > 0 {
		n, err := runBatch(db, log, ops)
		if n < len(ops) && n > 0 {
			// ops[n] failed after ops[:n] wrote: commit those without it,
			// then run it again at the head of the next round.
			_, err = runBatch(db, log, ops[:n])
		}
		if n == 0 {
			n = 1 // the head failed alone in a fresh transaction: its own error
		}
		for _, o := range ops[:n] {
			o.err = err
		}
		ops = ops[n:]
	}
	if log != nil && log.full() {
		// The batch is durable in the log already: a failed checkpoint
		// leaves the log growing, and the next batch tries again.
		_ = log.checkpoint(db)
	}
}

// runBatch runs ops in one transaction, logs its writes and commits it. It
// returns how many ops ran (all of them, unless one failed: then the index
// of the one that failed, with nothing committed) and the error of the
// commit, or of the failed op.
func runBatch(db *badger.DB, log *commitLog, ops []*commitOp) (int, error) {
	var err error
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		txn := &wtxn{Txn: db.NewTransaction(true), logging: log != nil}
		for i, o := range ops {
			if err := o.fn(txn); err != nil {
				txn.Discard()
				return i, commitErr(err)
			}
		}
		err = txn.commit(log)
		if !errors.Is(err, badger.ErrConflict) {
			return len(ops), commitErr(err)
		}
	}
	return len(ops), fmt.Errorf("store: gave up after %d conflicting attempts: %w", maxConflictRetries, err)
}

func commitErr(err error) error {
	if errors.Is(err, badger.ErrTxnTooBig) {
		return fmt.Errorf("%w: write too large for one transaction: %v", ErrInvalid, err)
	}
	return err
}

// wtxn is a read-write transaction of the store: badger's, with its
// writes encoded for the commit log as they are made (logging). Reads go
// to badger's Txn as they are; a read-only transaction is a wtxn too, so
// that one set of helpers serves both.
type wtxn struct {
	*badger.Txn
	logging bool
	ops     int
	// The ops, encoded (appendLogOp) for the log's record: parts, then
	// rec. A value of logValuePart bytes or more is a part of its own, the
	// caller's memory (which badger holds until the commit too), not a
	// copy in rec: 32 KiB offers and results were copied into a record
	// grown by doubling, 235 KB allocated per delegation.
	parts [][]byte
	rec   []byte
}

// logValuePart is the size from which a value goes into the log's record
// as it is (wtxn.parts).
const logValuePart = 4 << 10

func (t *wtxn) Set(key, value []byte) error {
	if err := t.Txn.Set(key, value); err != nil {
		return err
	}
	t.record(logOp{key: key, value: value})
	return nil
}

func (t *wtxn) SetEntry(e *badger.Entry) error {
	if err := t.Txn.SetEntry(e); err != nil {
		return err
	}
	t.record(logOp{key: e.Key, value: e.Value, userMeta: e.UserMeta, expiresAt: e.ExpiresAt})
	return nil
}

func (t *wtxn) Delete(key []byte) error {
	if err := t.Txn.Delete(key); err != nil {
		return err
	}
	t.record(logOp{del: true, key: key})
	return nil
}

func (t *wtxn) record(op logOp) {
	if !t.logging {
		return
	}
	t.ops++
	if op.del || len(op.value) < logValuePart {
		t.rec = appendLogOp(t.rec, op)
		return
	}
	t.rec = appendLogSetHead(t.rec, op.key, len(op.value))
	t.parts = append(t.parts, t.rec, op.value)
	t.rec = appendLogSetTail(t.rec[len(t.rec):], op) // after the part, never over it
}

// setSeg sets key to ref, a reference to data in a segment, and logs the
// set with data after ref as its value: what replay writes back into the
// segment before badger gets ref (segment.go).
func (t *wtxn) setSeg(key, ref, data []byte) error {
	if err := t.Txn.SetEntry(badger.NewEntry(key, ref).WithMeta(metaSegBlob)); err != nil {
		return err
	}
	if !t.logging {
		return nil
	}
	t.ops++
	t.rec = append(appendLogSetHead(t.rec, key, len(ref)+len(data)), ref...)
	t.parts = append(t.parts, t.rec, data)
	t.rec = appendLogSetTail(t.rec[len(t.rec):], logOp{userMeta: metaSegBlob})
	return nil
}

// logged is the transaction's ops as the log's record holds them, after
// head.
func (t *wtxn) logged(head []byte) [][]byte {
	return append(append(append(make([][]byte, 0, len(t.parts)+2), head), t.parts...), t.rec)
}

// commit writes the transaction's record to log (when there is one and
// the transaction wrote anything) and then commits it to badger.
//
// With a log, the commit returns once the record is durable and badger has
// given the transaction its commit timestamp, without waiting for badger to
// apply it (about a third of a synced commit's time beside the log's write,
// on the critical path of every durable write before). Nothing can read
// around it: badger starts every later transaction, read or write, only
// once each commit with an earlier timestamp is applied (its oracle's
// readTs), so a write is visible to every read that starts after it
// returns, as before. A commit badger refuses at once is cancelled in the
// log, as before. One it fails to apply afterwards (an I/O error on its own
// unsynced files, or a conflict, which cannot happen: batches run one at a
// time, each starting after the last one's timestamp) was acknowledged and
// is durable in the log: the log then refuses every later write, and the
// next open replays it into badger.
func (t *wtxn) commit(log *commitLog) error {
	if log == nil || t.ops == 0 {
		return t.Txn.Commit()
	}
	var head [1 + binary.MaxVarintLen64]byte
	head[0] = kindBatch
	n := binary.PutUvarint(head[1:], uint64(t.ops))
	seq, err := log.write(t.logged(head[:1+n])...)
	if err != nil {
		t.Discard()
		return err
	}
	var (
		mu       sync.Mutex
		returned bool  // CommitWith returned: the writers may have their answer
		early    error // what badger reported before it did
	)
	fault := log.applyFault
	log.applying.Add(1)
	t.Txn.CommitWith(func(err error) {
		defer log.applying.Done()
		if err == nil && fault != nil {
			err = fault()
		}
		mu.Lock()
		if !returned {
			early = err
			mu.Unlock()
			return
		}
		mu.Unlock()
		if err != nil {
			log.breakOff(fmt.Errorf("store: the database did not take a commit that is durable in the commit log; restart the node to replay it: %w", err))
		}
	})
	mu.Lock()
	returned = true
	err = early
	mu.Unlock()
	if err != nil {
		return errors.Join(err, log.abort(seq))
	}
	return nil
}
