package main

import "github.com/spf13/cobra"

func statusCmd() *cobra.Command {
	return &cobra.Command{Use: "status", Short: "Show reachability, addresses and connected peers", Hidden: true}
}
