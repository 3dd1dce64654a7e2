// Package bench owns `kith bench`: whole-system figures for delegation,
// measured side by side with the raw baselines they are built on, in one
// run, so that what gets reported is a ratio and not a lone absolute time
// (these machines are noisy; see TESTING.md, Benchmarks).
//
// One run starts two real libp2p hosts on loopback, with the same options
// as node.Run (TCP and QUIC transports; the hosts talk over TCP), and
// measures, at each concurrency asked for:
//
//   - bare stream echo: a new libp2p stream, the payload written, read back
//     and the stream closed — the floor any request over libp2p pays;
//   - delegation: Engine.Delegate then Engine.Wait for an echo task of the
//     same payload, from the first host's engine to the second's, with the
//     stores in memory, on disk without syncing, and on disk durable (the
//     default of a node).
//
// Before the phases it times the disk's fsync (a 4 KiB append and f.Sync)
// on a file in the durable stores' directory, because a durable delegation
// can be no faster than the syncs it waits for, and takes one delegation
// apart: every store write each side made for it, with its time.
//
// Every phase is closed-loop: N workers each run one operation after
// another for the phase's duration, after an uncounted warm-up. An operation
// counts when it completes inside the measured window. Round-trip
// percentiles use the nearest rank; throughput is operations completed per
// second of the window. Beside them each phase reports the process's CPU
// time per operation (both nodes live in it), which tells a phase bound by
// the CPU from one bound by waiting, and how much of the machine other
// processes took meanwhile, which tells a quiet run from a noisy one.
//
// Nothing here asserts a timing: Run reports figures and goals and says
// honestly which goals were met.
package bench
