package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
)

func dnssdCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "dnssd", Short: "DNS-SD records for this node"}
	cmd.AddCommand(dnssdRecordsCmd())
	return cmd
}

func dnssdRecordsCmd() *cobra.Command {
	var z node.DNSSDZone
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
			z.IPs = nil
			for _, s := range ips {
				ip, err := netip.ParseAddr(s)
				if err != nil {
					return fmt.Errorf("--ip %q is not an IP address", s)
				}
				z.IPs = append(z.IPs, ip)
			}
			info, err := c.Node(cmd.Context())
			if errors.Is(err, api.ErrDaemonNotRunning) {
				return fmt.Errorf("%w: start it first (kith daemon); the records carry its peer ID and listen addresses", err)
			}
			if err != nil {
				return err
			}
			lines, onlyLoopback, err := node.DNSSDRecords(info, z)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			domain := strings.TrimSuffix(z.Domain, ".")
			fmt.Fprintf(out, "; kith DNS-SD records for peer %s under %s\n", info.PeerID, domain)
			fmt.Fprintf(out, "; Add them to the zone; nodes with dnssd_domains = [%q] then find this one.\n", domain)
			if len(z.IPs) == 0 && onlyLoopback {
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
