package store

import (
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	lpcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: badger
// must stop all of its own on Close, and so must the store.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openTest opens a real on-disk store in a fresh temp directory and closes
// it when the test ends (unless the test closed it already).
func openTest(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	return openAt(t, dir, opts), dir
}

func openAt(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// reopen closes s and opens the same directory again, as a restart would.
func reopen(t testing.TB, s *Store, dir string, opts Options) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return openAt(t, dir, opts)
}

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := lpcrypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fakeClock is an injectable Options.Now that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}
