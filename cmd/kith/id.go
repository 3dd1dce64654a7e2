package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
)

func idCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "id",
		Short: "Print the peer ID, then one full multiaddr per line (the ID alone while no daemon runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, home, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.Node(cmd.Context())
			if errors.Is(err, api.ErrDaemonNotRunning) {
				// The peer ID is the key's; the addresses are the running
				// daemon's, so there are none to print.
				p, ierr := node.PeerIDOffline(home)
				if ierr != nil {
					return ierr
				}
				info, err = api.NodeInfo{PeerID: p.String(), Addrs: []string{}}, nil
				fmt.Fprintln(cmd.ErrOrStderr(), "daemon not running: the peer ID alone; addresses appear once \"kith daemon\" runs")
			}
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
		},
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}
