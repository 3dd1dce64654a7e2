package store

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// schemaVersion is the layout of keys and records this binary reads and
// writes. Bump it, and add a migration from the previous version in
// checkSchema, whenever an older binary would misread what a newer one
// writes; adding an optional JSON field does not need a bump.
//
// History:
//
//	1  first layout (keys.go), every record JSON.
//	2  delegation and event records binary (record.go); migrate1to2
//	   rewrites a version 1 store at open.
//	3  requester contexts indexed by update time (idx/ctxupd/), provider
//	   contexts (pctx/, idx/pctxupd/); migrate2to3 indexes the contexts of
//	   a version 2 store at open.
//	4  delegation records may be record version 2 (the peer as its binary
//	   ID, record.go), which a version 3 binary would take for corrupt;
//	   version 1 records still read, so migrate3to4 only stamps the
//	   version.
//	5  a large offer or result may be kept in a file under blobs/, its
//	   blob key holding a reference (blobfile.go), which a version 4
//	   binary would return as the value; values in badger still read,
//	   so migrate4to5 only stamps the version.
//	6  the last writes of a durable store may be in its commit log
//	   (commitlog.go) and not yet in badger's files, which a version 5
//	   binary would not read: it would lose them after a crash. Nothing
//	   else changed, so the migration only stamps the version.
//	7  offers and results from 128 KiB are kept in files (256 KiB
//	   before), whose references a version 6 binary takes for corrupt;
//	   the files of a version 6 store still read, so the migration only
//	   stamps the version.
//	8  offers and results from 4 KiB up to 256 KiB are kept in segment
//	   files (segment.go), their blob keys holding references a version 7
//	   binary would return as the value, and a durable store's commit log
//	   may carry such values beside their references; files from 256 KiB.
//	   Values in badger, and the files of a version 7 store (from
//	   128 KiB), still read, so the migration only stamps the version.
const schemaVersion uint64 = 8

// refuseNewer refuses a database written by a newer binary before open
// touches anything, its commit log included (whose format a newer binary
// may have changed).
func (s *Store) refuseNewer(where string) error {
	return s.view(func(txn *wtxn) error {
		v, err := getUint64(txn, []byte(keySchema)) // 0 when missing
		if err == nil && v > schemaVersion {
			err = fmt.Errorf("%w: %s has schema version %d, this kith knows versions up to %d; upgrade kith",
				ErrSchemaTooNew, where, v, schemaVersion)
		}
		return err
	})
}

// checkSchema stamps a fresh database with schemaVersion and migrates an
// older one, before anything else reads or writes it; open has refused one
// written by a newer binary already (refuseNewer).
func (s *Store) checkSchema(where string) error {
	var v uint64
	err := s.update(nil, func(txn *wtxn) error {
		_, err := txn.Get([]byte(keySchema))
		if errors.Is(err, badger.ErrKeyNotFound) {
			if !isEmpty(txn) {
				return fmt.Errorf("%w: %s holds data but no schema version (not a kith store?)", ErrCorrupt, where)
			}
			v = schemaVersion
			return txn.Set([]byte(keySchema), be64(schemaVersion))
		}
		if err != nil {
			return fmt.Errorf("store: read schema version of %s: %w", where, err)
		}
		v, err = getUint64(txn, []byte(keySchema))
		return err
	})
	if err != nil {
		return err
	}
	switch { // a newer version was refused before (refuseNewer)
	case v == 0:
		return fmt.Errorf("%w: %s has schema version 0", ErrCorrupt, where)
	case v == 1:
		if err := s.migrate1to2(where); err != nil {
			return err
		}
		if err := s.migrate2to3(where); err != nil {
			return err
		}
	case v == 2:
		if err := s.migrate2to3(where); err != nil {
			return err
		}
	}
	if v < 4 {
		if err := s.migrate3to4(); err != nil {
			return err
		}
	}
	if v < 5 {
		if err := s.migrate4to5(); err != nil {
			return err
		}
	}
	if v < 8 {
		return s.stampSchema(8)
	}
	return nil
}

// migrate3to4 stamps schema version 4: from now on this store may hold
// version 2 delegation records, which an older binary must not open.
func (s *Store) migrate3to4() error {
	return s.update(nil, func(txn *wtxn) error {
		return txn.Set([]byte(keySchema), be64(4))
	})
}

// migrate4to5 stamps schema version 5: from now on this store may keep
// large values in files, which an older binary must not open.
func (s *Store) migrate4to5() error { return s.stampSchema(5) }

// stampSchema records schema version v.
func (s *Store) stampSchema(v uint64) error {
	return s.update(nil, func(txn *wtxn) error {
		return txn.Set([]byte(keySchema), be64(v))
	})
}

func isEmpty(txn *wtxn) bool {
	o := badger.DefaultIteratorOptions
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	it.Rewind()
	return !it.Valid()
}
