// Package gateway is kith's A2A server: every profile the node can serve
// (its own, and the verified profiles of its peers) is an A2A agent, and
// every A2A task is a delegation.
//
// Routes, relative to the HTTP listener's root:
//
//	GET  /.well-known/agent-card.json          node card; its skills are the profiles
//	GET  /.well-known/agent.json               the same (legacy path)
//	GET  /.well-known/jwks.json                the node's Ed25519 key, kid = peer ID
//	GET  /a2a/<profile>/.well-known/agent-card.json
//	POST /a2a/<profile>                        JSON-RPC: v1.0 when A2A-Version is 1.0, v0.3 when empty or 0.3
//	     /a2a/<profile>/message:send, /tasks/… HTTP+JSON v1.0
//	     /a2a/<profile>/v1/message:send, …     HTTP+JSON v0.3
//	POST /a2a                                  JSON-RPC (v1.0 or v0.3) to the node agent: metadata "profile" picks one
//
// Tasks are not a second store: a task ID is the delegation ID (hex), the
// task's state is the delegation's, its history is the offer's message and
// its artifact the result's output, all read from the badger store, so
// tasks survive a restart and `kith tasks` shows the same work.
//
// Requests are bounded and checked before a2a-go sees them (rpc.go): body
// size, content type, the JSON-RPC envelope and the protocol version, so
// malformed input gets the standard A2A error and never reaches the engine.
//
// Cards are signed (sign.go): a JWS with EdDSA over the JCS-canonical card,
// kid = the node's peer ID, so a card proves which kith node serves it.
package gateway
