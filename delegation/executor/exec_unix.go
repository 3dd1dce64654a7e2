//go:build unix

package executor

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// isolate starts the command as the leader of a new process group, so that
// one signal reaches everything it forks.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to p's process
// group. A group that is already gone is not an error.
func signalGroup(p *os.Process, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
