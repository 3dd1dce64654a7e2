package executor

import (
	"encoding/json"
	"fmt"
	"os"
)

// historyFile is what a command finds at $KITH_CONTEXT_HISTORY: its
// task's context id and the context's earlier turns, oldest first, in
// Turn's JSON form (docs/contexts.md).
type historyFile struct {
	ContextID string `json:"context_id"`
	Turns     []Turn `json:"turns"`
}

// writeHistory writes task's history to a fresh file readable by this
// user only, for Exec's command; it returns "" when there is none. The
// caller removes the file when the command is done.
//
// A file rather than stdin or a variable: stdin stays the task's text, so
// a command that knows nothing of contexts runs as before, and a history
// can be far larger than the environment allows.
func writeHistory(task Task) (string, error) {
	if len(task.History) == 0 {
		return "", nil
	}
	b, err := json.Marshal(historyFile{ContextID: task.ContextID, Turns: task.History})
	if err != nil {
		return "", fmt.Errorf("%w: context history: %v", ErrFailed, err)
	}
	f, err := os.CreateTemp("", "kith-context-*.json") // mode 0600
	if err != nil {
		return "", fmt.Errorf("%w: context history: %v", ErrFailed, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("%w: context history: %v", ErrFailed, err)
	}
	return f.Name(), nil
}
