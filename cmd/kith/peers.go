package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
)

func peersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "peers", Short: "List and manage peers"}
	var lsJSON, logJSON bool
	add := &cobra.Command{
		Use:   "add MULTIADDR",
		Short: "Add a static peer (a full multiaddr ending in /p2p/<peer id>)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			p, err := c.AddPeer(cmd.Context(), args[0], "cli")
			if err != nil {
				return err
			}
			state := "not connected yet"
			if p.Connected {
				state = "connected"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s added (%s)\n", p.ID, state)
			return nil
		}),
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List known peers",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			peers, err := c.Peers(cmd.Context())
			if err != nil {
				return err
			}
			if lsJSON {
				return printJSON(cmd.OutOrStdout(), peers)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PEER\tCONNECTED\tTRUST\tACCESS\tSOURCES\tLAST SEEN\tADDRS")
			for _, p := range peers {
				seen := "-"
				if !p.LastSeen.IsZero() {
					seen = p.LastSeen.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Connected, p.Trust, p.Access,
					strings.Join(p.Sources, ","), seen, strings.Join(p.Addrs, " "))
			}
			return w.Flush()
		}),
	}
	jsonFlag(ls, &lsJSON)
	log := &cobra.Command{
		Use:   "log",
		Short: "Show the audit log of trust and allow/deny changes",
		Args:  cobra.NoArgs,
		RunE: withFallback(func(cmd *cobra.Command, _ []string, d daemonAPI, _ bool) error {
			entries, err := d.Audit(cmd.Context())
			if err != nil {
				return err
			}
			if logJSON {
				return printJSON(cmd.OutOrStdout(), entries)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SEQ\tTIME\tPEER\tCHANGE\tFROM\tTO\tORIGIN")
			for _, e := range entries {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Format(time.RFC3339), e.Peer, e.Action, e.From, e.To, e.Origin)
			}
			return w.Flush()
		}),
	}
	jsonFlag(log, &logJSON)
	cmd.AddCommand(add, ls, log,
		peerChangeCmd("allow ID", "Allow a peer (in allowlist mode, only allowed peers may connect)", 1,
			func(args []string) (api.PeerChange, error) { return api.PeerChange{Access: new(api.AccessAllow)}, nil }),
		peerChangeCmd("deny ID", "Deny a peer: refused on dial and accept, its live connections closed", 1,
			func(args []string) (api.PeerChange, error) { return api.PeerChange{Access: new(api.AccessDeny)}, nil }),
		peerChangeCmd("trust ID LEVEL", "Set a peer's trust level: untrusted, verified or trusted", 2,
			func(args []string) (api.PeerChange, error) {
				t, err := api.ParseTrust(args[1])
				return api.PeerChange{Trust: &t}, err
			}),
		peerChangeCmd("rm ID", "Forget a peer, its trust and allow/deny included: rm lifts a deny", 1,
			func(args []string) (api.PeerChange, error) { return api.PeerChange{Remove: true}, nil }),
	)
	return cmd
}

// peerChangeCmd builds a command that changes one peer. It applies to the
// running daemon at once; with no daemon running it edits the store, so
// the change holds when the daemon starts.
func peerChangeCmd(use, short string, nargs int, change func(args []string) (api.PeerChange, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(nargs),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Check everything before changing anything.
			p, err := node.ParsePeerID(args[0])
			if err != nil {
				return err
			}
			ch, err := change(args)
			if err != nil {
				return err
			}
			ch.Origin = "cli"
			return withFallback(func(cmd *cobra.Command, _ []string, d daemonAPI, offline bool) error {
				if err := d.ChangePeer(cmd.Context(), p.String(), ch); err != nil {
					return err
				}
				where := "running daemon"
				if offline {
					where = "store (daemon not running)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (%s)\n", p, strings.Fields(use)[0], where)
				if ch.Remove && wasDenied(cmd, d, p.String()) {
					fmt.Fprintf(cmd.OutOrStdout(), "%s was denied: forgetting it lifted the deny; it may connect again unless policy.mode is allowlist (\"kith peers deny %s\" refuses it again)\n", p, p)
				}
				return nil
			})(cmd, args)
		},
	}
}

// wasDenied reads the audit entry that removing p just wrote: it records
// the access p had.
func wasDenied(cmd *cobra.Command, d daemonAPI, p string) bool {
	entries, err := d.Audit(cmd.Context())
	for i := len(entries) - 1; err == nil && i >= 0; i-- {
		if e := entries[i]; e.Peer == p {
			return e.Action == "delete" && strings.Contains(e.From, "access=deny")
		}
	}
	return false
}
