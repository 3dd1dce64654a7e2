package main

import (
	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// client connects to the daemon of the selected home.
func client() (*api.Client, string, error) {
	home, err := config.HomeDir(homeFlag)
	if err != nil {
		return nil, "", err
	}
	cfg, err := node.LoadConfig(home)
	if err != nil {
		return nil, "", err
	}
	return api.NewClient(cfg.SocketPath(home)), home, nil
}
