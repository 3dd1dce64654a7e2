package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/bench"
)

func benchCmd() *cobra.Command {
	var (
		opts       bench.Options
		stores     []string
		asJSON     bool
		cpuProfile string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure delegation round trips and throughput against a bare libp2p stream, on loopback",
		Long: "Start two libp2p nodes on loopback and measure, in one run, a bare stream echo and\n" +
			"echo delegations with in-memory, unsynced and durable stores, plus the disk's fsync.\n" +
			"Compare the ratios, not the absolute figures: they are measured side by side.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			for _, s := range stores {
				opts.Stores = append(opts.Stores, bench.StoreKind(s))
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, f.Close()) }()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			progress := cmd.OutOrStdout()
			if asJSON {
				progress = cmd.ErrOrStderr()
			}
			r, err := bench.Run(cmd.Context(), opts, progress)
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(cmd.OutOrStdout(), r); err != nil {
					return fmt.Errorf("write report: %w", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Duration, "duration", 3*time.Second, "measured time per phase")
	f.DurationVar(&opts.Warmup, "warmup", 0, "uncounted warm-up before each phase (default duration/10, 50ms to 1s)")
	f.IntSliceVar(&opts.Concurrency, "concurrency", []int{1, 64}, "concurrent workers; each phase runs once per value")
	f.IntVar(&opts.Payload, "payload", 64, "bytes echoed per operation")
	f.StringSliceVar(&stores, "stores", []string{"memory", "nosync", "durable"}, "delegation store kinds to measure")
	f.StringVar(&opts.Dir, "dir", "", "directory for the on-disk stores and the fsync probe (default the system temp dir)")
	f.IntVar(&opts.FsyncSamples, "fsync-samples", 200, "fsyncs timed by the disk probe")
	f.BoolVar(&asJSON, "json", false, "write the report as JSON to stdout (progress and table go to stderr)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = f.MarkHidden("cpuprofile")
	return cmd
}
