//go:build !unix

package executor

import (
	"errors"
	"os"
	"os/exec"
)

// Without process groups and SIGTERM, killing the command itself is all
// that can be done; children it started may survive it.
func isolate(*exec.Cmd) {}

func signalGroup(p *os.Process, _ bool) error {
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
