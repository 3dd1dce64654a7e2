package main

import "github.com/spf13/cobra"

func dnssdCmd() *cobra.Command {
	return &cobra.Command{Use: "dnssd", Short: "DNS-SD records for this node", Hidden: true}
}
