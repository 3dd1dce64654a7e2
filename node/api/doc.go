// Package api holds the JSON shapes of kith's local REST API (under
// /api/v1/a2a/) and a small client for it. The daemon serves the API on its
// unix socket; the kith CLI is a thin layer over this client.
package api
