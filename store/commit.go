package store

import (
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Group commit. Every write of the store is a function over a badger
// transaction (update). Writers queue their functions; the writer at the
// head of the queue leads: it runs every function queued at that moment in
// one badger transaction and commits it, so that one commit, and one pair of
// syncs (value log and memtable WAL, see doc.go), makes all of them durable.
// While the leader syncs, new writers queue up behind it, and the first of
// them leads the next batch: the batch grows with the load by itself, and a
// lone writer commits at once, without waiting for company and without a
// goroutine hand-off.
//
// Badger's own batching (its write goroutine takes every commit waiting)
// shares the value-log sync but still syncs the memtable WAL once per
// transaction; merging the writes into one transaction shares both, and
// also saves badger's per-transaction bookkeeping. BenchmarkCommit in
// bench_test.go measures the two beside a bare badger Set and Commit.
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
	fn   func(txn *badger.Txn) error
	err  error
	wake chan struct{} // receives once: the op is done, or its writer leads
	lead bool          // set before wake: this writer leads the next batch
}

type committer struct {
	mu      sync.Mutex
	queue   []*commitOp
	leading bool // a writer is running a batch
}

// do runs fn in a batch and returns its own error once the batch that
// carried it has committed (or failed to).
func (c *committer) do(db *badger.DB, fn func(txn *badger.Txn) error) error {
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

	commitBatch(db, batch)

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

// commitBatch runs and commits ops, setting each one's err.
func commitBatch(db *badger.DB, ops []*commitOp) {
	for len(ops) > 0 {
		n, err := runBatch(db, ops)
		if n < len(ops) && n > 0 {
			// ops[n] failed after ops[:n] wrote: commit those without it,
			// then run it again at the head of the next round.
			_, err = runBatch(db, ops[:n])
		}
		if n == 0 {
			n = 1 // the head failed alone in a fresh transaction: its own error
		}
		for _, o := range ops[:n] {
			o.err = err
		}
		ops = ops[n:]
	}
}

// runBatch runs ops in one transaction and commits it. It returns how many
// ops ran (all of them, unless one failed: then the index of the one that
// failed, with nothing committed) and the error of the commit, or of the
// failed op.
func runBatch(db *badger.DB, ops []*commitOp) (int, error) {
	var err error
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		txn := db.NewTransaction(true)
		for i, o := range ops {
			if err := o.fn(txn); err != nil {
				txn.Discard()
				return i, commitErr(err)
			}
		}
		err = txn.Commit()
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
