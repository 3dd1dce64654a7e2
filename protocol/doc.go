// Package protocol owns kith's wire protocol, /kith/delegate/1.0.0: its
// protocol ID and version negotiation, the eight message types as domain
// values, their explicit conversion to and from the protobuf wire types in
// protocol/pb, the size-capped framing every stream uses, and the payloads
// of signed capability assertions and result proofs.
//
// Code above this package never sees a pb type: it builds a DelegationOffer
// (say), calls EncodeMessage, and hands the bytes to package crypto to seal.
// Every decoder validates what it reads (identifier sizes, string and list
// limits from limits.go, enum ranges) and fails with an error that
// errors.Is(err, ErrMalformed); no input makes it panic.
//
// # A stream
//
// The opener (requester) opens a libp2p stream with protocol ID ID. Every
// frame on it, the Hello included, is a uvarint length followed by that many
// bytes; FrameReader refuses lengths above its cap (DefaultMaxFrame) before
// reading or allocating anything, and every read and write carries a
// deadline (ReadFrameDeadline, WriteFrameDeadline).
//
//	opener                                                          responder
//	  |                                                                  |
//	  |  uvarint len | Hello (in the clear)                              |
//	  |              |   header    = encoded EnvelopeHeader {version,    |
//	  |              |               type, sender, recipient,            |
//	  |              |               message_id, issued_at, expires_at,  |
//	  |              |               enc (HPKE encapsulated key)}        |
//	  |              |   signature = Ed25519(sender, header bytes)       |
//	  |----------------------------------------------------------------->|
//	  |                                                                  |  checks recipient, sender ==
//	  |  uvarint len | seq (8 bytes, big-endian) | AES-256-GCM(Message)  |  remote peer, signature,
//	  |----------------------------------------------------------------->|  clock, replay; then opens
//	  |        key: HPKE sender context (nonces from its sequence)       |
//	  |                                                                  |
//	  |  uvarint len | seq (8 bytes, big-endian) | AES-256-GCM(Message)  |
//	  |<-----------------------------------------------------------------|
//	  |        key: AES-256-GCM key exported from the same HPKE          |
//	  |             context (as Oblivious HTTP does)                     |
//	  |                                 ...                              |
//
//	AAD of every sealed frame: the header bytes, exactly as sent.
//	Plaintext of every sealed frame: one encoded pb.Message (EncodeMessage),
//	carrying exactly one of the eight bodies.
//
// # Large messages (1.1)
//
// A task or result may carry up to MaxPayload (64 MiB) of part content. A
// message whose encoding is larger than ChunkSize (1 MiB) is sent as
// consecutive frames whose body is a Chunk: the first names the total
// size, each carries the next piece of the encoding, and nothing else may
// come between them on that direction of the stream. The receiver joins
// them (refusing a total above its cap before it allocates, and growing
// its buffer only as bytes arrive) and decodes the whole, so hashes and
// transcripts cover the same bytes as if the message had come in one
// frame. No frame is larger than about ChunkSize, whatever the payload.
//
//	| len | seq | AES-GCM(Chunk{total_size: N, data: bytes[0:1 MiB]}) |
//	| len | seq | AES-GCM(Chunk{data: bytes[1 MiB:2 MiB]})            |
//	| ...                                                            |
//	| len | seq | AES-GCM(Chunk{data: bytes[k MiB:N]})                |
//
// Package crypto encodes the EnvelopeHeader and Hello and seals and opens the
// frames; this package frames bytes and encodes the plaintext. The schema of
// all of it, the envelope included, is protocol/pb/kith.proto.
//
// # Compatibility
//
// Field numbers are never reused. A new major version is a new protocol ID;
// minor versions add fields or enum values and are negotiated in
// capability_query (Negotiate). Decoders ignore unknown fields, and reject
// unknown enum values and message types with ErrUnknownEnum.
//
// # Protocol history
//
//	2026-11-21  /kith/delegate/1.0.0  initial: eight message types, HPKE
//	                                  envelope, uvarint framing (4 MiB cap).
//	2026-11-22  1.1                   Chunk (Message field 9): messages over
//	                                  1 MiB travel in chunks, payloads up to
//	                                  64 MiB; max_payload_bytes (assertion
//	                                  field 8); reject reason
//	                                  payload_too_large (11).
package protocol
