// Package node wires a kith node together: it loads the identity and the
// config, builds the libp2p host, opens the store, runs the delegation
// engine, connects static peers and serves the local control API on a unix
// socket and, when [api] listen is set, on TCP behind a bearer token, with
// its OpenAPI document, the A2A gateway (node/gateway), the dashboard
// (dashboard.go, files in the binary) and Prometheus metrics at /metrics
// (metrics.go, one registry per node). It holds no protocol logic of its
// own.
//
// Construction (New) does no I/O; Run does it all and owns every goroutine
// it starts, returning only after they have stopped.
package node
