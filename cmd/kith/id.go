package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func idCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print the peer ID, then one full multiaddr per line",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			info, err := c.Node(cmd.Context())
			if err != nil {
				return err
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
