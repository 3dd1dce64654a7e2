package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func idCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print the peer ID, then one full multiaddr per line (the ID alone while no daemon runs)",
		Args:  cobra.NoArgs,
		RunE: withFallback(func(cmd *cobra.Command, _ []string, d daemonAPI, offline bool) error {
			info, err := d.Node(cmd.Context())
			if err != nil {
				return err
			}
			if offline {
				// The peer ID is the key's; the addresses are the running
				// daemon's, so there are none to print.
				fmt.Fprintln(cmd.ErrOrStderr(), "daemon not running: the peer ID alone; addresses appear once \"kith daemon\" runs")
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.PeerID)
			for _, a := range info.Addrs {
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}
