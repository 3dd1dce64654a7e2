package labtest

import (
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records how a helper stopped the test.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped = true
	panic(stop{})
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	panic(stop{})
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("") }

type stop struct{}

func run(tb testing.TB, f func(testing.TB)) (r *recorder) {
	r = &recorder{TB: tb}
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stop); !ok {
				panic(p)
			}
		}
	}()
	f(r)
	return r
}

// A missing lab skips, except where CI requires it, where it fails.
func TestLackingSkipsUnlessRequired(t *testing.T) {
	t.Setenv(NetnsRequired, "")
	if r := run(t, func(tb testing.TB) { Lacking(tb, NetnsRequired, "no namespace") }); !r.skipped || r.failed {
		t.Errorf("not required: skipped %v failed %v, want a skip", r.skipped, r.failed)
	}
	t.Setenv(NetnsRequired, "1")
	if r := run(t, func(tb testing.TB) { Lacking(tb, NetnsRequired, "no namespace") }); r.skipped || !r.failed {
		t.Errorf("required: skipped %v failed %v, want a failure", r.skipped, r.failed)
	}
	if r := run(t, func(tb testing.TB) { Tool(tb, NetnsRequired, "no-such-tool-kith", "nothing") }); !r.failed {
		t.Error("a missing tool under KITH_NETNS_REQUIRED=1 did not fail")
	}
	if r := run(t, func(tb testing.TB) { Tool(tb, NetnsRequired, "sh", "dash") }); r.failed || r.skipped {
		t.Error("sh was not found")
	}
}

// WaitFor returns as soon as the condition holds, and fails at the
// deadline when it never does; in fake time, the schedule is exact.
func TestWaitFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		WaitFor(t, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
		if calls != 3 || time.Since(start) != 15*time.Millisecond { // 5ms, then 10ms
			t.Errorf("%d calls over %v, want 3 over 15ms", calls, time.Since(start))
		}
		start = time.Now()
		r := run(t, func(tb testing.TB) { WaitFor(tb, time.Second, "never", func() bool { return false }) })
		if !r.failed || time.Since(start) < time.Second || time.Since(start) > time.Second+time.Millisecond {
			t.Errorf("never: failed %v after %v, want a failure at 1s", r.failed, time.Since(start))
		}
	})
}
