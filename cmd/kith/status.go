package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show reachability, addresses and connected peers (direct or relayed, round-trip time)",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			s, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, s)
			}
			return printStatus(out, s)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printStatus(out io.Writer, s api.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "peer\t%s\n", s.PeerID)
	fmt.Fprintf(w, "version\t%s\n", s.Version)
	fmt.Fprintf(w, "reachability\t%s\n", s.Reachability)
	fmt.Fprintf(w, "NAT\ttcp %s, udp %s\n", s.NATTCP, s.NATUDP)
	if s.NATNote != "" {
		fmt.Fprintf(w, "\t(%s)\n", s.NATNote)
	}
	relay := "off"
	if s.RelayService {
		relay = "on, for " + map[string]string{"allowlist": "allowed peers only", "open": "any peer not denied"}[s.RelayPolicy]
	}
	fmt.Fprintf(w, "relay service\t%s\n", relay)
	labelled(w, "relays", s.Relays, "none configured")
	labelled(w, "listening on", s.ListenAddrs, "nothing")
	labelled(w, "relay addresses", s.RelayAddrs, "none (no reservation)")
	labelled(w, "addresses", s.Addrs, "none")
	var observed []string
	for _, o := range s.ObservedAddrs {
		observed = append(observed, fmt.Sprintf("%s (by %d %s)", o.Addr, o.Observers, plural(o.Observers, "peer", "peers")))
	}
	labelled(w, "observed", observed, "none yet")
	if len(s.ReachableAddrs) > 0 || len(s.UnreachableAddrs) > 0 {
		labelled(w, "reachable", s.ReachableAddrs, "none confirmed")
		labelled(w, "unreachable", s.UnreachableAddrs, "none")
	}
	if err := w.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\n%d connected %s\n", len(s.Peers), plural(len(s.Peers), "peer", "peers"))
	if len(s.Peers) == 0 {
		return nil
	}
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PEER\tPATH\tRTT\tAGENT\tHOLE PUNCH\tCONNECTIONS")
	for _, p := range s.Peers {
		rtt := "-"
		if p.RTTMillis > 0 {
			rtt = fmt.Sprintf("%.2fms", p.RTTMillis)
		}
		punch := "-"
		if hp := p.HolePunch; hp != nil {
			punch = fmt.Sprintf("succeeded in %.0fms", hp.ElapsedMillis)
			if !hp.Success {
				punch = "failed: " + oneLineCut(hp.Error, 80)
			}
		}
		var conns []string
		for _, c := range p.Conns {
			conns = append(conns, fmt.Sprintf("%s (%s)", c.Addr, c.Direction))
		}
		agent := p.Agent
		if agent == "" {
			agent = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Path, rtt, agent, punch, strings.Join(conns, " "))
	}
	return w.Flush()
}

// labelled prints a labelled list, one item a line, or none when it is empty.
func labelled(w io.Writer, label string, items []string, none string) {
	if len(items) == 0 {
		fmt.Fprintf(w, "%s\t%s\n", label, none)
		return
	}
	for i, it := range items {
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "%s\t%s\n", label, it)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneLineCut keeps a table cell on one line and at most max runes: go-libp2p's
// dial errors span lines, one per address tried (kith status --json has
// them whole).
func oneLineCut(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}
