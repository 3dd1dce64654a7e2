package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Records are stored as JSON of unexported structs with explicit tags (the
// *Record types beside each concept). JSON because the records are small, a
// human can read them with badger's CLI when something goes wrong, and
// adding an optional field needs no migration. Enums are stored as their
// text form ("trusted", "running"), never as numbers, so reordering a Go
// const block cannot silently change their meaning on disk. Times are Unix
// nanoseconds (0 for the zero time): exact, and free of time zones.

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// getJSON reads key into v; a missing key is ErrNotFound wrapped with what.
func getJSON(txn *wtxn, key []byte, v any, what string) error {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return fmt.Errorf("store: read %s: %w", what, err)
	}
	return item.Value(func(b []byte) error { return decodeJSON(b, v, what) })
}

func decodeJSON(b []byte, v any, what string) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: decode %s: %v", ErrCorrupt, what, err)
	}
	return nil
}

func setJSON(txn *wtxn, key []byte, v any, what string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", what, err)
	}
	if err := txn.Set(key, b); err != nil {
		return fmt.Errorf("store: write %s: %w", what, err)
	}
	return nil
}

// getUint64 reads an 8-byte big-endian counter; a missing key reads as 0.
func getUint64(txn *wtxn, key []byte) (uint64, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: read %q: %w", key, err)
	}
	var n uint64
	err = item.Value(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("%w: %q holds %d bytes, want 8", ErrCorrupt, key, len(b))
		}
		n = binary.BigEndian.Uint64(b)
		return nil
	})
	return n, err
}

// nextSeq increments the counter at key and returns the new value, so
// sequences start at 1. Reading the counter puts it in the transaction's
// read set: two transactions that both increment it conflict.
func nextSeq(txn *wtxn, key []byte) (uint64, error) {
	n, err := getUint64(txn, key)
	if err != nil {
		return 0, err
	}
	n++
	if err := txn.Set(key, be64(n)); err != nil {
		return 0, fmt.Errorf("store: write %q: %w", key, err)
	}
	return n, nil
}

// scanPrefix calls fn for every live key under prefix, in key order (or
// reverse order), until fn returns errStop or an error. Values are fetched
// lazily, so key-only scans of indexes stay cheap.
func scanPrefix(txn *wtxn, prefix, start []byte, reverse bool, fn func(item *badger.Item) error) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.Reverse = reverse
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	if start == nil {
		start = prefix
		if reverse {
			// Past every key under prefix: prefix + 0xff… sorts after all of them
			// as long as no key part is that long a run of 0xff, which IDs,
			// hex and our timestamps never are.
			start = append(append([]byte{}, prefix...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		}
	}
	for it.Seek(start); it.Valid(); it.Next() {
		if err := fn(it.Item()); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

var errStop = errors.New("stop scan")
