package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Discovery is GET /discovery: every peer this node knows of, with where
// it was found and what its verified capabilities say, and the input the
// discovery sources dropped. With ?profile=NAME it lists the providers of
// that profile, looking them up in the DHT when no known peer offers it.
type Discovery struct {
	Peers   []DiscoveredPeer  `json:"peers"`
	DHTMode string            `json:"dht_mode,omitempty"` // "" when the DHT is off
	Dropped map[string]uint64 `json:"dropped"`            // "source/reason" → count
	// Rejected counts refused capability assertions by reason (forged,
	// expired, mismatched_peer, ...).
	Rejected map[string]uint64 `json:"rejected"`
}

// DiscoveredPeer is one entry of Discovery.
type DiscoveredPeer struct {
	ID        string   `json:"id"`
	Sources   []string `json:"sources"` // static, mdns, dnssd, dht, gossip
	Addrs     []string `json:"addrs,omitempty"`
	Trust     Trust    `json:"trust"`
	Access    Access   `json:"access"`
	Connected bool     `json:"connected"`
	// Profiles are the profiles its verified capability assertion lists;
	// empty when none is known.
	Profiles []string `json:"profiles"`
	// Capability says where that assertion came from: "query" or "gossip".
	Capability string    `json:"capability,omitempty"`
	Load       *Load     `json:"load,omitempty"`
	Expires    time.Time `json:"capability_expires,omitzero"`
	LastSeen   time.Time `json:"last_seen,omitzero"`
	RTT        *Duration `json:"rtt,omitempty"`
	Provider   bool      `json:"provider,omitempty"` // offers the profile asked for, and is connected
	// Unreachable says why a peer whose verified capabilities offer the
	// profile asked for could not be connected (no address known, dial
	// failed); a delegation cannot reach it either.
	Unreachable string     `json:"unreachable,omitempty"`
	Issued      *time.Time `json:"capability_issued,omitempty"`
}

// Load is a provider's load when it signed its assertion.
type Load struct {
	Active    uint32 `json:"active"`
	FreeSlots uint32 `json:"free_slots"`
}

// Duration is a time.Duration that reads well in JSON ("1.2ms").
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Discover lists known peers; a non-empty profile lists that profile's
// providers, searching the DHT if needed.
func (c *Client) Discover(ctx context.Context, profile string) (Discovery, error) {
	var d Discovery
	path := "/discovery"
	if profile != "" {
		path += "?profile=" + url.QueryEscape(profile)
	}
	return d, c.do(ctx, http.MethodGet, path, nil, &d)
}
