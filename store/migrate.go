package store

import (
	"bytes"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// migrateBatch bounds the records one migration transaction rewrites, and
// migrateBatchBytes the inline bytes it writes, well under badger's
// transaction limit (values past valueThreshold count only as pointers).
const (
	migrateBatch      = 256
	migrateBatchBytes = 512 << 10
)

// migrate1to2 rewrites the JSON delegation and event records of a schema
// version 1 store in the binary codec (record.go), a batch per transaction,
// then stamps the store version 2. It can stop anywhere (a crash, a full
// disk) and run again at the next open: the version is stamped last, and
// records already binary are skipped.
func (s *Store) migrate1to2(where string) error {
	for _, m := range []struct {
		prefix string
		recode func(b []byte, what string) ([]byte, error)
	}{
		{prefixDelegation, func(b []byte, what string) ([]byte, error) {
			r, err := decodeDelegationRecord(b, what)
			if err != nil {
				return nil, err
			}
			return r.encode()
		}},
		{prefixEvent, func(b []byte, what string) ([]byte, error) {
			r, err := decodeEventRecord(b, what)
			if err != nil {
				return nil, err
			}
			return r.encode()
		}},
	} {
		start := []byte(m.prefix)
		for {
			var keys, vals [][]byte
			size := 0
			err := s.view(func(txn *wtxn) error {
				return scanPrefix(txn, []byte(m.prefix), start, false, func(item *badger.Item) error {
					start = append(item.KeyCopy(nil), 0) // the next key after this one
					return item.Value(func(b []byte) error {
						if len(b) == 0 || b[0] != '{' {
							return nil // binary already
						}
						v, err := m.recode(b, fmt.Sprintf("%q", item.Key()))
						if err != nil {
							return err
						}
						keys, vals = append(keys, item.KeyCopy(nil)), append(vals, v)
						if len(v) < valueThreshold {
							size += len(v)
						}
						if len(keys) == migrateBatch || size >= migrateBatchBytes {
							return errStop
						}
						return nil
					})
				})
			})
			if err != nil {
				return fmt.Errorf("store: migrate %s to schema 2: %w", where, err)
			}
			if len(keys) == 0 {
				break
			}
			err = s.update(nil, func(txn *wtxn) error {
				for i, k := range keys {
					if err := txn.Set(k, vals[i]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("store: migrate %s to schema 2: %w", where, err)
			}
			if !bytes.HasPrefix(start, []byte(m.prefix)) {
				break
			}
		}
	}
	return s.update(nil, func(txn *wtxn) error {
		return txn.Set([]byte(keySchema), be64(2))
	})
}
