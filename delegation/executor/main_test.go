package executor

import (
	"testing"

	"go.uber.org/goleak"
)

// Executors start goroutines (stdout readers, waiters) and the tests start
// HTTP servers and subprocesses; none may outlive its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
