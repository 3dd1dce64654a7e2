package config

import (
	"testing"
	"time"
)

func TestDurationUnmarshalText(t *testing.T) {
	good := map[string]time.Duration{
		"30s":     30 * time.Second,
		"5m":      5 * time.Minute,
		"1h":      time.Hour,
		"1h30m":   90 * time.Minute,
		"250ms":   250 * time.Millisecond,
		"1.5s":    1500 * time.Millisecond,
		"0":       0,
		"0s":      0,
		"-1s":     -time.Second, // parses; Validate rejects it where it matters
		"2h45m3s": 2*time.Hour + 45*time.Minute + 3*time.Second,
	}
	for in, want := range good {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil {
			t.Errorf("UnmarshalText(%q): %v", in, err)
			continue
		}
		if d.Std() != want {
			t.Errorf("UnmarshalText(%q) = %s, want %s", in, d.Std(), want)
		}
	}
	for _, in := range []string{"", "30", "5 m", "1x", "s", "1d", "forever"} {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("UnmarshalText(%q) = %s, want an error", in, d)
		}
	}
}

func TestDurationString(t *testing.T) {
	tests := map[time.Duration]string{
		0:                                  "0s",
		30 * time.Second:                   "30s",
		5 * time.Minute:                    "5m",
		time.Hour:                          "1h",
		90 * time.Minute:                   "1h30m",
		time.Hour + time.Second:            "1h0m1s",
		10 * time.Minute:                   "10m",
		250 * time.Millisecond:             "250ms",
		time.Minute + 500*time.Millisecond: "1m0.5s",
		-5 * time.Minute:                   "-5m",
	}
	for d, want := range tests {
		got := Duration(d).String()
		if got != want {
			t.Errorf("Duration(%s).String() = %q, want %q", d, got, want)
		}
		text, err := Duration(d).MarshalText()
		if err != nil || string(text) != want {
			t.Errorf("MarshalText(%s) = %q, %v", d, text, err)
		}
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back.Std() != d {
			t.Errorf("%q parses back to %s, %v; want %s", text, back, err, d)
		}
	}
}

func TestDurationsInFile(t *testing.T) {
	c, err := Parse([]byte(`
[limits]
stream_idle_timeout = "1m30s"
default_timeout = "10m"
max_timeout = "24h"
envelope_max_skew = "5s"

[[profiles]]
name = "slow"
executor = "echo"
timeout = "2h"
`))
	if err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	got := []time.Duration{l.StreamIdleTimeout.Std(), l.DefaultTimeout.Std(), l.MaxTimeout.Std(), l.EnvelopeMaxSkew.Std(), c.Profiles[0].Timeout.Std()}
	want := []time.Duration{90 * time.Second, 10 * time.Minute, 24 * time.Hour, 5 * time.Second, 2 * time.Hour}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("duration %d = %s, want %s", i, got[i], want[i])
		}
	}
}
