package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// Options configure a Store. The zero value is the safe default: durable
// writes, badger's own logging discarded, the wall clock.
type Options struct {
	// Logger receives badger's warnings and errors (and its chatter at debug
	// level) under component=store. Nil discards them.
	Logger *slog.Logger

	// NoSync turns off syncing on commit: a call then returns once the
	// write is in the OS page cache, and a machine crash may lose the last
	// writes (never corrupt older ones). For benchmarks and throwaway nodes
	// only. Named after bbolt's DB.NoSync so that the zero value is the
	// durable one: a forgotten field must not silently drop durability.
	NoSync bool

	// Now is the clock for record timestamps and replay expiry; nil means
	// time.Now. Tests inject one to step time without sleeping.
	Now func() time.Time

	// MaxReplayEntries is the most live replay-cache entries the store
	// holds; 0 means crypto.DefaultMaxReplayEntries. When it is full, a new
	// message ID is refused (crypto.ErrReplayCacheFull), never recorded by
	// evicting a live one; see CheckAndRemember.
	MaxReplayEntries int

	// Metrics, when set, observe every commit (metrics.go).
	Metrics *Metrics

	// Contexts bound the context state kept (context.go); zero fields
	// take their defaults.
	Contexts ContextLimits
}

// Badger tuning. Badger's defaults (64 MiB memtables ×5, a 256 MiB block
// cache, 1 GiB value-log files) suit one large database per process; kith
// tests run many nodes in one process and a node's data is small, so every
// node gets a few MiB instead.
//
// A transaction's inline values are capped at 15% of the memtable (~1.2
// MiB). Values of valueThreshold or more go elsewhere and count only as
// pointers, so a Transition carrying a large result and a large event still
// fits: offers and results of fileBlobMin or more to files of their own
// (blobfile.go), event payloads to badger's value log, whose garbage when
// such a record is rewritten CollectGarbage reclaims. The threshold stays
// high because badger learns what in its value log is garbage only from
// compactions of its tree: a record rewritten in place, a provider context
// at each turn, left every old value there (3,000 rewrites of a 100 KiB
// value grew the value log to 528 MB with nothing reclaimed,
// docs/performance.md). Records, indexes and small events stay inline. In memory (OpenInMemory)
// every value is inline, so values and transactions there are limited to
// memValueSize and ~1.2 MiB.
const (
	memTableSize     = 8 << 20
	numMemtables     = 2
	blockCacheSize   = 8 << 20
	valueThreshold   = 256 << 10
	valueLogFileSize = 2 * MaxValueSize // badger refuses a value larger than one log file
	numCompactors    = 2                // badger refuses 1; 0 would never compact

	// Level 0 takes up to numL0Tables memtable flushes before they are
	// compacted into level 1 in one go (badger's default: 5), and writes
	// stall at numL0Stall (15). Each compaction of level 0 rewrites the
	// part of level 1 it overlaps, which with delegation IDs spread over
	// the key space is all of it: fewer, larger ones rewrite it less
	// often. Small durable delegations at 64 in flight ran 6–10% faster
	// on 8% less CPU, with a p99 of 25 ms against 34–35 ms, and a 64 KiB
	// delegation, its values then inline, took 3.2–3.4 ms of CPU against
	// 4.2–4.5 ms (docs/performance.md; such values go to segments now,
	// segment.go). The price: a read that misses checks that many more
	// tables' bloom filters.
	numL0Tables = 12
	numL0Stall  = 30

	// MaxValueSize caps one opaque value (an offer, a result, an event's
	// data, a meta value) on disk; larger ones are ErrInvalid. It holds the
	// largest message the protocol carries (protocol.MaxMessage). In memory
	// the cap is memValueSize: there every value is inline and badger
	// refuses one over 1 MiB, and JSON's base64 grows event data by a third.
	MaxValueSize = protocol.MaxMessage + 1<<20
	memValueSize = 512 << 10
	maxKeySize   = 1 << 10 // for PutMeta keys; every other key is bounded by construction
)

// maxConflictRetries bounds the retry of a transaction that lost a badger
// conflict. Writers of one record are already serialised by keyLocks, so a
// conflict means an unlocked writer (PruneReplay) touched the same key; a
// handful of retries is plenty, and a bound turns a livelock into an error.
const maxConflictRetries = 32

// Store is a node's persistent state. It is safe for concurrent use.
type Store struct {
	db       *badger.DB
	now      func() time.Time
	maxValue int // MaxValueSize, or memValueSize in memory
	locks    keyLocks

	// mu is held shared by every operation and exclusively by Close, so
	// Close waits for operations in flight and none starts on a closed
	// badger (which would panic rather than fail).
	mu     sync.RWMutex
	closed bool

	replay  replayMem
	watch   watchers // Watch's subscribers
	commits committer

	metrics *Metrics // nil: not measured

	ctxLimits ContextLimits

	// files keeps large offers and results (blobfile.go); nil in memory,
	// where every value is inline.
	files *fileBlobs
	// segs keeps mid-size offers and results (segment.go); nil in memory.
	segs *segments

	peers peerCache // GetPeer's answers (peercache.go)

	// gcMu makes CollectGarbage one at a time. gcPins are the iterators
	// (and their transactions) it left open because badger's files could
	// not be synced after a collection; Close syncs and closes them.
	gcMu   sync.Mutex
	gcPins []func()
}

// Open opens, or creates, the store in dir (created with mode 0700 if
// missing: it holds trust decisions and task contents). Opening a store
// written by a newer kith fails with ErrSchemaTooNew and changes nothing.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty store directory", ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", dir, err)
	}
	// Badger never syncs on commit: a durable store's commit log does
	// (commitlog.go), with one synced write per commit.
	bo := badgerOptions(dir, opts)
	s, err := open(bo, opts, dir, MaxValueSize, !opts.NoSync)
	if err != nil {
		return nil, err
	}
	if err := s.openFileBlobs(dir, !opts.NoSync); err != nil {
		return nil, errors.Join(err, s.db.Close(), s.commits.log.close())
	}
	return s, nil
}

// OpenInMemory returns a store that lives in memory only and is lost on
// Close. It is for unit tests of other packages that need a Store but not
// its durability; tests of durability itself use Open on a temp directory.
func OpenInMemory(opts Options) (*Store, error) {
	bo := badgerOptions("", opts).WithValueThreshold(1 << 20)
	bo.InMemory = true
	return open(bo, opts, "(in memory)", memValueSize, false)
}

func badgerOptions(dir string, opts Options) badger.Options {
	bo := badger.DefaultOptions(dir).
		WithMemTableSize(memTableSize).
		WithNumMemtables(numMemtables).
		WithBlockCacheSize(blockCacheSize).
		WithValueThreshold(valueThreshold).
		WithValueLogFileSize(valueLogFileSize).
		WithNumCompactors(numCompactors).
		WithNumLevelZeroTables(numL0Tables).
		WithNumLevelZeroTablesStall(numL0Stall).
		WithMetricsEnabled(false) // kith exports its own metrics; badger's go to a global expvar
	bo.Logger = nil // badger checks for nil and stays silent
	if opts.Logger != nil {
		bo.Logger = badgerLogger{opts.Logger.With("component", "store")}
	}
	return bo
}

// open opens badger with bo and, for a durable store (logged), its commit
// log: the log's records are applied to badger before anything reads it,
// and once the schema is checked and migrated a checkpoint makes all of
// it durable and starts the log over.
func open(bo badger.Options, opts Options, where string, maxValue int, logged bool) (_ *Store, err error) {
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", where, err)
	}
	s := &Store{db: db, now: opts.Now, maxValue: maxValue, metrics: opts.Metrics,
		ctxLimits: opts.Contexts.withDefaults(maxValue)}
	if err := s.refuseNewer(where); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if bo.Dir != "" {
		if s.segs, err = openSegments(bo.Dir, !opts.NoSync); err != nil {
			return nil, errors.Join(err, db.Close())
		}
		defer func() {
			if err != nil {
				err = errors.Join(err, s.segs.close())
			}
		}()
	}
	if logged {
		log, records, err := openCommitLog(bo.Dir)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("store: open %s: %w", where, err), db.Close())
		}
		defer func() {
			if err != nil {
				err = errors.Join(err, log.close())
			}
		}()
		if err := replayLog(db, records, s.segs); err != nil {
			return nil, errors.Join(fmt.Errorf("store: open %s: %w", where, err), db.Close())
		}
		log.beforeTruncate = func() error { return s.segs.syncDirty(false) }
		s.commits.log = log
	} else if bo.Dir != "" {
		if err := dropCommitLog(db, bo.Dir, s.segs); err != nil {
			return nil, errors.Join(fmt.Errorf("store: open %s: %w", where, err), db.Close())
		}
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.replay.max = opts.MaxReplayEntries
	if s.replay.max <= 0 {
		s.replay.max = crypto.DefaultMaxReplayEntries
	}
	if err := s.checkSchema(where); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := s.loadReplay(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	// What was replayed or migrated becomes durable in badger before the
	// log starts over; a log that holds nothing needs no checkpoint.
	if s.commits.log != nil && !s.commits.log.empty() {
		if err := s.commits.log.checkpoint(db); err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
	return s, nil
}

// Close waits for operations in flight, then flushes and closes the
// database. Later calls return ErrClosed, including a second Close.
func (s *Store) Close() error {
	flushErr := s.flushReplay() // before the lock: it writes through update
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.closeStaged()
	if s.commits.log != nil {
		s.commits.log.applying.Wait() // badger takes every batch before it closes
	}
	var err error
	if len(s.gcPins) > 0 {
		err = syncBadger(s.db, s.commits.log.dir) // before the files of a collection go
		for _, release := range s.gcPins {
			release()
		}
	}
	err = errors.Join(err, s.db.Close(), s.segs.close())
	if s.commits.log != nil {
		err = errors.Join(err, s.commits.log.close())
	}
	if err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	if flushErr != nil && !errors.Is(flushErr, ErrClosed) {
		return fmt.Errorf("store: close: write replay entries: %w", flushErr)
	}
	return nil
}

// MaxValue is the largest opaque value this store takes: an offer or a
// result of at most this many bytes can be stored. The delegation engine
// carries no task or result larger than its store can keep.
func (s *Store) MaxValue() int { return s.maxValue }

// Syncs reports whether a write returns only once it is durable, waiting
// for the disk: a durable store's do, those of a store opened with NoSync
// or in memory do not.
func (s *Store) Syncs() bool { return s.commits.log != nil }

// Quiet reports whether no write is being committed or waits to be: a
// write made now would be a batch of its own, waiting for the disk alone.
func (s *Store) Quiet() bool { return s.commits.quiet() }

// clock returns the current time without its monotonic reading, so that
// what is returned equals what is stored and read back.
func (s *Store) clock() time.Time { return s.now().Round(0).UTC() }

// checkSize refuses values over the cap with a clear error before badger
// does so with a hex dump of the value in its message.
func (s *Store) checkSize(values ...[]byte) error {
	for _, v := range values {
		if len(v) > s.maxValue {
			return fmt.Errorf("%w: value of %d bytes exceeds the store's cap of %d", ErrInvalid, len(v), s.maxValue)
		}
	}
	return nil
}

// view runs fn in a read-only transaction.
func (s *Store) view(fn func(txn *wtxn) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.db.View(func(t *badger.Txn) error { return fn(&wtxn{Txn: t}) })
}

// update runs fn in a read-write transaction while holding the in-process
// locks on lockKeys, and returns once that transaction has committed. The
// transaction may carry the writes of other callers too (group commit, see
// commit.go), and fn may run more than once (a batch that lost a member, a
// badger conflict), so fn must derive everything it writes from what it
// reads; when it fails, nothing it wrote is committed.
func (s *Store) update(lockKeys []string, fn func(txn *wtxn) error) error {
	s.files.awaitStaged(lockKeys) // stage.go: no batch waits on a file
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	unlock := s.locks.lock(lockKeys...)
	defer unlock()
	defer s.peers.forget(lockKeys) // after the commit, before the unlock

	defer s.metrics.observeCommit(time.Now())
	return s.commits.do(s.db, fn)
}

// CollectGarbage reclaims value-log space held by large values (event
// payloads, and offers and results a schema 4 store kept there) that were
// overwritten or deleted; files of replaced offers and results go at the
// next Open (blobfile.go). The store starts no goroutines beyond badger's
// own, so nothing runs this by itself: the node calls it from its run loop
// now and then, beside PruneReplay. Each call rewrites at most a few log
// files, each only if at least half of it is garbage.
//
// Badger's garbage collection moves the live values of a log file with
// writes of its own, which the commit log does not see and badger, without
// SyncWrites, does not sync, and then removes the file, unless an iterator
// is open: then the removal waits until the last one closes. So a durable
// store holds an iterator open while it collects, syncs badger's files
// (syncBadger), and only then lets the files go: a crash never finds a
// moved value neither in its old file nor durably in its new place.
func (s *Store) CollectGarbage() (err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	if log := s.commits.log; log != nil {
		txn := s.db.NewTransaction(false)
		it := txn.NewIterator(badger.IteratorOptions{})
		release := func() { it.Close(); txn.Discard() }
		defer func() {
			if err == nil {
				err = syncBadger(s.db, log.dir)
			}
			if err != nil {
				// Without the sync the files must stay: the iterator
				// stays open, and badger keeps them, until Close.
				s.gcPins = append(s.gcPins, release)
				return
			}
			release()
		}()
	}
	for range 4 {
		err := s.db.RunValueLogGC(0.5)
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected),
			errors.Is(err, badger.ErrGCInMemoryMode):
			return nil // nothing (more) to reclaim, a GC already running, or no log
		case err != nil:
			return fmt.Errorf("store: value log gc: %w", err)
		}
	}
	return nil
}
