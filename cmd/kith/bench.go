package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
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
		large      []string
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
			opts.Large = []int{} // none unless named
			for _, s := range large {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				n, err := parseSize(s)
				if err != nil {
					return fmt.Errorf("--large %q: %w", s, err)
				}
				opts.Large = append(opts.Large, n)
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
	f.StringSliceVar(&large, "large", []string{"1MiB", "16MiB"}, "large payloads, each copied over a bare stream and delegated on every store kind (\"\" for none)")
	f.IntVar(&opts.LargeRuns, "large-runs", 0, fmt.Sprintf("timed runs of each large phase, after one uncounted (default as many as %d MiB of the payload make, %d to %d)",
		bench.LargeRunBytes>>20, bench.DefaultLargeRuns, bench.MaxLargeRuns))
	f.StringVar(&opts.Dir, "dir", "", "directory for the on-disk stores and the fsync probe (default the system temp dir)")
	f.IntVar(&opts.FsyncSamples, "fsync-samples", 200, "fsyncs timed by the disk probe")
	f.BoolVar(&asJSON, "json", false, "write the report as JSON to stdout (progress and table go to stderr)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = f.MarkHidden("cpuprofile")
	return cmd
}

// parseSize reads a byte count: a number with an optional KiB, MiB or B
// suffix ("16MiB", "65536").
func parseSize(s string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, errors.New("want a positive number of bytes, with an optional B, KiB or MiB suffix")
	}
	if n > math.MaxInt32/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}
