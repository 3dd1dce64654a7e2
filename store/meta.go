package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// PutMeta stores value under key in a small key-value space of its own, for
// features that need a few durable settings without a schema of their own
// (e.g. the time of the last DHT bootstrap). Keep values small: they are
// held in memory tables like every record.
func (s *Store) PutMeta(key string, value []byte) error {
	if key == "" || len(key) > maxKeySize {
		return fmt.Errorf("%w: meta key of %d bytes (want 1 to %d)", ErrInvalid, len(key), maxKeySize)
	}
	if err := s.checkSize(value); err != nil {
		return err
	}
	return s.update(nil, func(txn *wtxn) error {
		if err := txn.Set(metaKey(key), bytes.Clone(value)); err != nil {
			return fmt.Errorf("store: write meta %q: %w", key, err)
		}
		return nil
	})
}

// GetMeta returns the value stored under key, or ErrNotFound.
func (s *Store) GetMeta(key string) ([]byte, error) {
	var v []byte
	err := s.view(func(txn *wtxn) error {
		item, err := txn.Get(metaKey(key))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: meta %q", ErrNotFound, key)
		}
		if err != nil {
			return fmt.Errorf("store: read meta %q: %w", key, err)
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	return v, err
}
