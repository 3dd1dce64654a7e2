// Command kith runs and controls a kith node: an encrypted peer-to-peer
// overlay that lets home-lab machines delegate agent tasks to each other.
//
// This package only parses flags, loads configuration and calls into the
// node package or the daemon's API; the logic lives there.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := rootCmd().ExecuteContext(ctx)
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "kith:", err)
		os.Exit(1)
	}
}

var homeFlag string

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kith",
		Short:         "kith joins home-lab machines into one private mesh for delegating agent tasks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&homeFlag, "home", "", "node home directory (default $KITH_HOME, else $XDG_DATA_HOME/kith)")
	root.AddCommand(initCmd(), daemonCmd(), idCmd(), peersCmd(), delegateCmd(), tasksCmd(), demoCmd(), benchCmd(), gpuCmd(), statusCmd(), discoverCmd(), dnssdCmd(), apiCmd(), cardCmd(), dashboardCmd())
	return root
}

// printJSON writes v as indented JSON, the --json output of the commands.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
