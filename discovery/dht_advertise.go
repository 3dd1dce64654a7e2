package discovery

// Advertising on the DHT: the provider records of the local profiles, put
// now (Advertise) and kept up while the node runs (Run).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kithmesh/kith/protocol"
)

// Advertise puts a provider record for each profile now, on the DHT
// servers closest to its ProfileKey. It returns every failure, joined; a
// profile whose name protocol.CheckProfileName refuses is not advertised.
func (d *DHT) Advertise(ctx context.Context, profiles []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, name := range normalizeProfiles(profiles) {
		if err := protocol.CheckProfileName(name); err != nil {
			errs = append(errs, fmt.Errorf("discovery: advertise %q: %w", name, err))
			continue
		}
		wg.Go(func() {
			if err := d.kad.Provide(ctx, ProfileKey(name), true); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("discovery: advertise %q: %w", name, err))
				mu.Unlock()
				return
			}
			d.log.Debug("profile advertised", "profile", name)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Run advertises profiles() as soon as the routing table holds a peer,
// again every ReprovideInterval, and whenever profiles() changes, which it
// checks every minute. A round that failed is tried again as soon as the
// routing table gains a peer (30 seconds later at most), and while the
// table is smaller than one bucket every growth starts a round (at most
// one every 2 s): in a home lab the first round often runs before any
// server is known, and the first servers known are not the closest to a
// profile's key. A profile that is dropped is no longer re-advertised; its
// records lapse within 48 hours, and nobody trusts them anyway until the
// node's signed capability assertion says so. Run returns when ctx ends.
//
// Run also keeps the peers of the routing table's two widest buckets
// connected (keep).
func (d *DHT) Run(ctx context.Context, profiles func() []string) {
	var kept sync.WaitGroup
	defer kept.Wait()
	kept.Go(func() { d.keep(ctx) })
	current := normalizeProfiles(profiles())
	next := time.NewTimer(0)
	defer next.Stop()
	check := time.NewTicker(d.profileCheck)
	defer check.Stop()
	rtTick := time.NewTicker(routingTableCheck)
	defer rtTick.Stop()
	// lastSize is the routing table's size at the last round; failed says
	// that round failed; lastAt is when it ran.
	lastSize, failed := 0, false
	var lastAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-rtTick.C:
			size := d.kad.RoutingTable().Size()
			grew := size > lastSize && (failed || lastSize < smallTable)
			if grew && len(current) > 0 && now.Sub(lastAt) >= regrowAdvertiseGap {
				d.log.Debug("routing table grew; advertising again", "peers", size, "was", lastSize)
				next.Reset(0)
			}
		case <-check.C:
			now := normalizeProfiles(profiles())
			if slices.Equal(now, current) {
				continue
			}
			current = now
			d.log.Debug("profiles changed", "profiles", current)
			next.Reset(0)
		case <-next.C:
			wait := d.reprovide
			lastSize, lastAt, failed = d.kad.RoutingTable().Size(), time.Now(), false
			if len(current) > 0 && lastSize == 0 {
				// Nothing to put records on: wait for the table to grow.
				failed = true
				next.Reset(advertiseRetry)
				continue
			}
			if err := d.advertiseRound(ctx, current); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.log.Debug("advertise round failed", "error", err)
				failed = true
				wait = min(wait, advertiseRetry)
			}
			next.Reset(wait)
		}
	}
}

func (d *DHT) advertiseRound(ctx context.Context, profiles []string) error {
	if len(profiles) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, advertiseTimeout)
	defer cancel()
	return d.Advertise(ctx, profiles)
}

// normalizeProfiles sorts and deduplicates profile names, so that two
// lists can be compared.
func normalizeProfiles(profiles []string) []string {
	out := slices.Clone(profiles)
	slices.Sort(out)
	return slices.Compact(out)
}
