package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func discoverCmd() *cobra.Command {
	var profile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "List known peers: where each was found, its verified profiles, trust and load",
		Long: `List every peer this node knows of, with the sources that named it
(static, mdns, dnssd, dht, gossip), the profiles its signed capability
assertion lists (only verified assertions count), the trust this node gives
it, its load when it signed, and when it was last seen. Below the table come
the counters of input the sources dropped and of refused assertions.

With --profile NAME, list only the providers of NAME; when no known peer
offers it, the node asks the DHT for providers, connects to them and
verifies their capabilities first.`,
		Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			d, err := c.Discover(cmd.Context(), profile)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, d)
			}
			if profile != "" && !slices.ContainsFunc(d.Peers, func(p api.DiscoveredPeer) bool { return p.Provider }) {
				for _, p := range d.Peers {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s offers %s but cannot be reached: %s\n", p.ID, profile, p.Unreachable)
				}
				return fmt.Errorf("no reachable provider of %q found", profile)
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PEER\tSOURCES\tPROFILES\tTRUST\tLOAD\tRTT\tCONNECTED\tLAST SEEN")
			for _, p := range d.Peers {
				profiles := strings.Join(p.Profiles, ",")
				if profiles == "" {
					profiles = "-"
				} else {
					profiles += " (" + p.Capability + ")"
				}
				load := "-"
				if p.Load != nil {
					load = fmt.Sprintf("%d active, %d free", p.Load.Active, p.Load.FreeSlots)
				}
				rtt := "-"
				if p.RTT != nil {
					rtt = time.Duration(*p.RTT).Round(10 * time.Microsecond).String()
				}
				seen := "-"
				if !p.LastSeen.IsZero() {
					seen = p.LastSeen.Format(time.RFC3339)
				}
				trust := p.Trust.String()
				if p.Access != api.AccessNone {
					trust += "/" + p.Access.String()
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%s\n", p.ID, strings.Join(p.Sources, ","), profiles,
					trust, load, rtt, p.Connected, seen)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if d.DHTMode != "" {
				fmt.Fprintf(out, "\nDHT mode: %s\n", d.DHTMode)
			}
			for _, p := range d.Peers {
				if p.Unreachable != "" {
					fmt.Fprintf(out, "%s offers %s but cannot be reached: %s\n", p.ID, profile, p.Unreachable)
				}
			}
			printCounters(out, "dropped input", d.Dropped)
			printCounters(out, "refused capability assertions", d.Rejected)
			return nil
		}),
	}
	cmd.Flags().StringVar(&profile, "profile", "", "list only providers of this profile, searching the DHT if no known peer offers it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON")
	return cmd
}

func printCounters(w io.Writer, title string, m map[string]uint64) {
	if len(m) == 0 {
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	fmt.Fprintf(w, "%s: %s\n", title, strings.Join(parts, " "))
}
