package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/node/api"
)

func dnssdCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dnssd", Short: "DNS-SD records for this node"}
	cmd.AddCommand(dnssdRecordsCmd())
	return cmd
}

func dnssdRecordsCmd() *cobra.Command {
	var z discovery.Zone
	var ips []string
	cmd := &cobra.Command{
		Use:   "records --domain D [--ip ADDR]... [--instance NAME] [--host NAME] [--ttl N]",
		Short: "Print the DNS records that publish this node under a domain",
		Long: "Print, in zone-file syntax, the records that publish the running node under a\n" +
			"domain you control: a DNS-SD service (_kith-a2a._tcp PTR, SRV, TXT), the host's\n" +
			"A/AAAA records, and one _dnsaddr TXT record per multiaddr. Nodes configured with\n" +
			"dnssd_domains = [\"D\"] then find this one.\n\n" +
			"The addresses are the daemon's listen addresses, without loopback and link-local\n" +
			"ones unless there is nothing else. --ip puts the given IP in every address\n" +
			"instead of the daemon's own: for a node behind port forwarding, or whose public\n" +
			"IP the host does not see.",
		Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			var override []netip.Addr
			for _, s := range ips {
				ip, err := netip.ParseAddr(s)
				if err != nil {
					return fmt.Errorf("--ip %q is not an IP address", s)
				}
				override = append(override, ip)
			}
			info, err := c.Node(cmd.Context())
			if errors.Is(err, api.ErrDaemonNotRunning) {
				return fmt.Errorf("%w: start it first (kith daemon); the records carry its peer ID and listen addresses", err)
			}
			if err != nil {
				return err
			}
			id, err := peer.Decode(info.PeerID)
			if err != nil {
				return fmt.Errorf("the daemon's peer ID %q: %w", info.PeerID, err)
			}
			addrs, err := discovery.PublishAddrs(id, info.Addrs, override)
			if err != nil {
				return err
			}
			z.TXT = discovery.TXT{Peer: id, Profiles: info.Profiles, Addrs: addrs}
			lines, err := discovery.ZoneRecords(z)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "; kith DNS-SD records for peer %s under %s\n", id, strings.TrimSuffix(z.Domain, "."))
			fmt.Fprintf(out, "; Add them to the zone; nodes with dnssd_domains = [%q] then find this one.\n", strings.TrimSuffix(z.Domain, "."))
			if len(override) == 0 && allLoopback(addrs) {
				fmt.Fprintln(out, "; Only loopback addresses: other machines cannot reach them (see --ip).")
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: the daemon listens only on loopback addresses; other machines cannot reach them (see --ip)")
			}
			for _, l := range lines {
				fmt.Fprintln(out, l)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&z.Domain, "domain", "", "domain the records go under, e.g. lab.example.org (required)")
	cmd.Flags().StringSliceVar(&ips, "ip", nil, "publish this IP in place of the daemon's own, in every address (repeatable)")
	cmd.Flags().StringVar(&z.Instance, "instance", "", "DNS-SD instance name (default kith-<last 8 characters of the peer ID>)")
	cmd.Flags().StringVar(&z.Host, "host", "", "host name under the domain, or an absolute name ending in \".\" (default as --instance)")
	cmd.Flags().Uint32Var(&z.TTL, "ttl", 300, "TTL of the records, in seconds")
	_ = cmd.MarkFlagRequired("domain")
	return cmd
}

// allLoopback reports whether every IP address among addrs is loopback.
func allLoopback(addrs []ma.Multiaddr) bool {
	for _, a := range addrs {
		if !manet.IsIPLoopback(a) {
			return false
		}
	}
	return len(addrs) > 0
}
