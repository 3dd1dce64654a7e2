package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
)

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, commit and build time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return printJSON(cmd.OutOrStdout(), node.BuildInfo())
			}
			printVersion(cmd.OutOrStdout())
			return nil
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

// printVersion is "kith version" and "kith --version".
func printVersion(w io.Writer) {
	b := node.BuildInfo()
	fmt.Fprintf(w, "kith %s\n", b.Version)
	if b.Revision != "" {
		dirty := ""
		if b.Modified {
			dirty = " (with uncommitted changes)"
		}
		fmt.Fprintf(w, "commit  %s%s\n", b.Revision, dirty)
	}
	if !b.Time.IsZero() {
		fmt.Fprintf(w, "date    %s\n", b.Time.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "go      %s\n", b.GoVersion)
}
