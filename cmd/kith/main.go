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
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
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
		fmt.Fprintln(os.Stderr, "kith:", userMessage(err))
		os.Exit(1)
	}
}

var homeFlag string

// pkgPrefix matches the "store: " that kith's packages put before their
// errors for their callers; a user reads the message without them.
var pkgPrefix = regexp.MustCompile(`(^|: )(?:bench|config|crypto|delegation|discovery|executor|gateway|gpu|node|protocol|store): `)

// userMessage is err's text without kith's package prefixes.
func userMessage(err error) string {
	msg := err.Error()
	for {
		out := pkgPrefix.ReplaceAllString(msg, "$1")
		if out == msg {
			return out
		}
		msg = out
	}
}

// groupsFailOnUnknown makes every command that only holds subcommands
// refuse an unknown one with a non-zero exit, instead of printing its help
// and exiting 0 (cobra's default below the root).
func groupsFailOnUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groupsFailOnUnknown(sub)
	}
	if c.Runnable() || !c.HasSubCommands() || !c.HasParent() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for %q; see %s --help", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return cmd.Help()
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kith",
		Short:         "kith joins home-lab machines into one private mesh for delegating agent tasks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// --version: cobra's flag, printing what "kith version" prints.
	root.Version = node.Version
	root.SetVersionTemplate("{{printVersion}}")
	cobra.AddTemplateFunc("printVersion", func() string {
		var b strings.Builder
		printVersion(&b)
		return b.String()
	})
	root.PersistentFlags().StringVar(&homeFlag, "home", "", "node home directory (default $KITH_HOME, else $XDG_DATA_HOME/kith)")
	root.AddCommand(initCmd(), daemonCmd(), idCmd(), peersCmd(), delegateCmd(), tasksCmd(), demoCmd(), benchCmd(), gpuCmd(), statusCmd(), discoverCmd(), dnssdCmd(), apiCmd(), cardCmd(), dashboardCmd(), versionCmd(), reloadCmd(), planCmd())
	groupsFailOnUnknown(root)
	return root
}

// jsonFlag adds the --json flag of a listing.
func jsonFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, "print JSON instead of a table")
}

// printJSON writes v as indented JSON, the --json output of the commands.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
