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
// them (refusing a total above its cap before it allocates, and taking
// memory only as bytes arrive, never more than twice what has come) and
// decodes the whole, so hashes and
// transcripts cover the same bytes as if the message had come in one
// frame. No frame is larger than about ChunkSize, whatever the payload.
//
//	| len | seq | AES-GCM(Chunk{total_size: N, data: bytes[0:1 MiB]}) |
//	| len | seq | AES-GCM(Chunk{data: bytes[1 MiB:2 MiB]})            |
//	| ...                                                            |
//	| len | seq | AES-GCM(Chunk{data: bytes[k MiB:N]})                |
//
// # Envelope sessions (1.2)
//
// A full setup (three X25519, an Ed25519 signature and its verification)
// was a quarter of a delegation's CPU. A 1.2 opener keeps the outcome of
// one setup per peer and opens later streams to that peer inside it, with
// no public-key operation:
//
//	setup stream   Hello{header v1 {..., enc, session_offer: true}, signature}
//	               -> responder checks it as any setup, keeps the session
//	               <- uvarint 16 | ack (clear)   in the same Write as its first reply
//	               <- sealed frames as on any setup stream
//	session stream Hello{header v2 {version 2, type, sender, recipient,
//	                     message_id (fresh), issued_at, expires_at,
//	                     session_id (the setup's message_id), stream_seq n},
//	                     mac = HMAC-SHA256(helloKey, header)}
//	               -> responder: parties, session, mac, times, n unseen
//	               <- sealed frames under keys derived for this stream
//	stale session  <- uvarint 1 | 0x01 (reject, clear); the opener sets the
//	               same stream up in full and sends its messages again; the
//	               responder skips the sealed frames it could not open
//
//	S        = setup context.Export("kith session v1", 32)
//	helloKey = HKDF-Expand(S, "kith session hello key v1", 32)
//	ack      = HKDF-Expand(S, "kith session ack v1", 16)
//	k        = HKDF-Expand(S, "kith session stream v1 " || header bytes, 64)
//	k[0:32] opener->responder, k[32:64] responder->opener (AES-256-GCM,
//	nonce = the direction's frame sequence, AAD = header bytes)
//
// Control frames (ack, reject) are shorter than crypto.FrameOverhead, so
// none can be taken for a sealed frame; the opener accepts them only before
// the responder's first sealed frame, an ack only when it offered, a reject
// only on a session stream and once per stream. A cancel stream, which gets
// no answer, neither offers nor uses a session: only an answer can confirm
// or reject one.
//
// Why this keeps every guarantee of the per-stream envelope:
//
//   - Who holds S. A session is created only from a setup stream that
//     passed every check of a setup (recipient, sender is the remote peer,
//     signature, times, the durable replay cache), and only when its signed
//     header asks for one. S is an HPKE exporter output of that context:
//     known to the sender and to the holder of the recipient's key, no one
//     else, and independent of the setup stream's own frame keys.
//   - Sender binding. The responder files a session under (the sender's
//     peer ID, the setup's message ID) and looks a session stream up under
//     the libp2p remote peer of the stream, whose header must name that
//     peer as sender and this node as recipient. The MAC proves knowledge
//     of S; the responder never MACs under a session it accepts streams in
//     (its own sessions to that peer are separate), so nothing can be
//     reflected.
//   - Replay. A stream number is accepted once per session: the responder
//     keeps a window of the 1024 numbers behind the highest it has seen,
//     records a number only after the MAC and the times check out, refuses
//     a number seen again (crypto.ErrReplayed), and rejects one older than
//     the window as stale (the opener then sets up in full). Sessions live
//     in memory only and die with the process, so after a restart no
//     stream of an old session is accepted at all; the setup stream itself
//     stays in the durable replay cache until it expires, as before.
//   - Expiry. Every session stream's header carries issued_at and
//     expires_at under the same checks as a setup (skew, lifetime cap).
//     A session is bounded in time (crypto.SessionLifetime, 10 minutes from
//     the responder's acceptance; the opener stops a minute earlier) and in
//     streams (crypto.MaxSessionStreams, 65,536); each stream in frames as
//     before.
//   - Key separation. Each stream's keys come from S and its whole header,
//     which differs in stream_seq and a fresh message_id; the two
//     directions take different halves; the hello key, the ack and the
//     stream keys use different labels. No (key, nonce) pair repeats.
//   - Downgrade and forgery. The offer is signed. The ack is a value only
//     a holder of S computes, so a forged ack installs nothing. The reject
//     is not authenticated beyond libp2p's secure channel; all it can do is
//     make the opener set the stream up in full, which costs time and
//     weakens nothing. Stripping offers yields the 1.1 behaviour.
//   - Memory. A responder keeps at most 4 sessions per peer (the oldest
//     gives way) and 4096 in all (then offers go unanswered), about 400
//     bytes each. An opener keeps one per peer and one offer in flight per
//     peer.
//   - Restarts. A restarted responder answers a stale session with the
//     reject and the stream goes on as a full setup: no error reaches the
//     caller, nothing hangs (each read has its deadline). A restarted opener
//     holds no session and sets up afresh.
//
// Sessions are negotiated in the envelope itself, not in capability_query,
// because the envelope comes first: a 1.1 responder ignores the signed
// offer (an unknown header field) and answers with a sealed frame, which
// tells the opener there will be no ack; a 1.1 opener never offers.
//
// # Multi-turn delegations (1.3)
//
// An executor may pause a delegation to ask its requester a question. The
// provider ends the turn with a delegation_status of state input_required
// whose partial is the question and whose usage is what the conversation
// has used; it gives back the remote-pool slot and the VRAM lease while it
// waits. The requester answers with a continuation: a delegation_offer
// that names the same delegation_id, carries turn n+1 and the answer as
// its task, and nothing else. The provider checks it (the peer is the
// delegation's requester, the delegation waits for input, the turn follows,
// the deadline has not passed, budget is left), logs it, and answers with
// a running status of the new turn before the executor runs again with
// every turn so far. Deadline and budget are the first offer's, for the
// whole conversation.
//
//	requester                                                 provider
//	  | delegation_offer{id, ..., multi_turn: true}               |
//	  |---------------------------------------------------------->|
//	  |<-- delegation_accept, status{running, turn 1} ... --------|
//	  |<-- status{input_required, turn 1, partial: question,      |
//	  |           usage so far} ----------------------------------|  slot and lease given back
//	  | delegation_offer{id, turn: 2, task: answer}               |
//	  |---------------------------------------------------------->|  checked, logged
//	  |<-- status{running, turn 2} ... ---------------------------|
//	  |<-- delegation_result{proof{turns: 2, transcript covers    |
//	  |      accept, statuses and the continuation, in order}} ---|
//
// Negotiation both ways: a requester marks an offer multi_turn, and sends
// continuations, only to a provider whose assertion lists 1.3; a provider
// pauses only an offer so marked (otherwise a question fails the
// delegation, as before 1.3). A 1.2 peer ignores the turn field and so
// reads a continuation as an offer with no profile: malformed, refused,
// never a fresh task. A continuation that cannot continue is answered with
// a delegation_reject: unknown_delegation (no such delegation of this
// peer, also when another peer has one), not_waiting, turn_out_of_order,
// expired or budget_too_low; the delegation is unchanged.
//
// # Stream reuse (1.4)
//
// A new stream costs the muxer's open and acknowledgement, libp2p's
// protocol negotiation (two writes on the listener's side), both sides'
// close and, under a session, the stream's own keys: on loopback about as
// much as everything else in a bare echo. So a 1.4 requester keeps a
// delegation's stream once the result has come on it, and sends its next
// offer to the same provider there, sealed as the next frame of the same
// stream; a 1.4 provider reads a stream on after a result (it always
// waited there for the requester's close) and serves an offer that comes
// as it would a new stream's first message, admitted as of its arrival.
//
//	requester                                                 provider
//	  | Hello | delegation_offer{id A}                            |
//	  |---------------------------------------------------------->|
//	  |<-- delegation_accept, status, delegation_result{A} -------|
//	  | delegation_offer{id B}     (same stream, next frame)      |
//	  |---------------------------------------------------------->|  served as a new offer
//	  |<-- delegation_accept, status, delegation_result{B} -------|
//	  | close                                                     |
//
// The requester sends the next offer only after a result (and, under 1.5,
// its confirmation), only to a provider whose capability assertion lists 1.4 (a 1.3 provider reads
// nothing after a result but the close), and keeps a stream at most 10
// seconds idle, for at most 5 minutes and 1,024 delegations from its open,
// and never one over a relayed (limited) connection.
// A provider takes an offer that comes before the current task is over
// once it is. A kept stream found closed, or with no answer to the offer
// within 5 seconds (a provider answers within its open delay, or rejects at
// once), gives way to a new stream, on which the provider takes the offer
// as new or, if it had it after all, as a reattach.
//
// Why every guarantee of the envelope holds: nothing about a frame
// changes. The offer is sealed under the stream's keys with the next
// sequence number, so it is as authentic, as confidential and as bound to
// the two peers and to the stream's header as any later frame of a
// delegation; a replayed or reordered frame fails to open, as before; no
// (key, nonce) pair repeats. The stream's Hello passed the replay and
// clock checks when the stream opened; the offers after it are fresh by
// their sequence numbers, and the provider checks each offer's timeout
// from its arrival. The bounds on a kept stream's age and uses keep its
// keys to a time and a number of frames of the order of one long
// delegation's.
//
// # Provisional results (1.5)
//
// A provider whose store syncs writes a fast task's record once, at its
// end, with the result (offer, accept, statuses and result in one synced
// write), and before 1.5 sent nothing until that write was durable: its
// sync and then the requester's own write of the result lay one after
// the other on every delegation's path. A 1.5 requester asks, in its
// offer (provisional_result), for the result as soon as it is signed; the
// provider may then send the accept, statuses and result while its write
// syncs, and a delegation_status{stored: true, the result's state} once
// the write is durable. The two syncs overlap. (kith's provider does so
// when its write would wait for the disk alone; under load, where writes
// share a sync, it writes first.)
//
//	requester                                                 provider
//	  | delegation_offer{id, ..., provisional_result: true}       |
//	  |---------------------------------------------------------->|  task runs
//	  |<-- delegation_accept, status, delegation_result{id} ------|  record written,
//	  |  checks the proof, stores the result (synced)             |  syncing meanwhile
//	  |<-- delegation_status{id, state, stored: true} ------------|  durable
//	  | (the stream is kept for the next offer, 1.4)              |
//
// A provider sends the confirmation after every result to an offer that
// asked for it: at once after a result already stored (a slow task's,
// one sent again to a reattaching requester, or on a store that does not
// sync, in the same Write). A requester asks only a provider whose
// capability assertion lists 1.5, and reads the confirmation after the
// result, before it keeps the stream for its next offer; a confirmation
// that comes where it is not awaited is ignored.
//
// What is acknowledged, and when:
//
//   - The provider acknowledges that it holds the delegation with the
//     confirmation, sent only once its record (result included) is
//     durable. Nothing before it on such a stream is an acknowledgement:
//     the offer asked for it so.
//   - The requester reports a result to its caller once it has checked it
//     and made it durable in its own store, as before 1.5: what it
//     reports is what it holds, whatever befalls the provider.
//   - If the provider dies, or fails to store its record, after sending
//     the result and before confirming it, the requester still holds a
//     result that the provider signed over this very offer and
//     transcript; what is lost is the provider's record of work whose
//     outcome it never confirmed, which is also what a provider that dies
//     while a task runs loses. The requester's log says the confirmation
//     did not come. Before 1.5 the requester, told nothing, offered the
//     task again, and it ran twice.
//   - Replay protection is unchanged: it rests on the envelope (the setup
//     stream's durable replay cache, the session's stream numbers), not on
//     the provider's record of the delegation.
//
// # Proof digests (1.6)
//
// A result proof binds the offer, the transcript and the output by their
// digests. Before 1.6 they were SHA-256; a 1.6 requester may ask, in its
// offer (proof_digest), for BLAKE3, and the proof names the hash it was
// made with (digest, signed with the rest). Both sides hash a large
// delegation's offer and output once each, four passes over the payload
// per delegation, and BLAKE3 takes SIMD lanes where SHA-256 has only its
// own instructions or none: on the AMD EPYC kith is benchmarked on, one
// core hashes 4.2 GB/s of BLAKE3 against 1.8 GB/s of SHA-256 (SHA
// instructions), and a 1 MiB delegation, both nodes on 2 cores, took
// about 6% less time and 7% less CPU (docs/performance.md).
//
//	requester                                                 provider
//	  | delegation_offer{id, ..., proof_digest: BLAKE3}            |
//	  |---------------------------------------------------------->|  agrees if it too
//	  |<-- delegation_result{proof{digest: BLAKE3, offer, ... }} -|  makes BLAKE3 fastest
//	  |  checks the digests the proof names                       |
//
// A node asks for, and agrees to, the digest it makes fastest
// (FastestDigest): BLAKE3, but SHA-256 on an arm64 core with the SHA-2
// instructions, where BLAKE3 is portable code, and on an x86 core with the
// SHA instructions and no AVX2 (Atom-class), where BLAKE3's narrower
// lanes are no faster. A provider uses the
// digest the offer asks for only when it would ask for it too, and
// SHA-256 otherwise, so either side may keep SHA-256. A requester asks
// only a provider whose capability assertion lists 1.6; an older provider
// ignores the field and makes SHA-256 proofs, which every version checks.
// A requester checks a proof with the digest the proof names, whichever
// of the known ones it is: both are collision-resistant hashes of 256
// bits, and what a proof is worth rests on that, not on which of the two
// the provider chose. A digest this build does not know is refused in an
// offer and in a proof (ErrUnknownEnum), and a continuation carries no
// proof_digest (the first offer's stands). Because the digest is part of
// the signed payload, a proof cannot be relabelled from one hash to the
// other without breaking its signature. Proofs stored before 1.6 carry no
// digest field and are SHA-256, as they were made.
//
// # Writes
//
// A Conn writes the Hello and the first message in one Write, the session
// ack in the same Write as the responder's first reply, and messages
// queued with Queue together with the next Send: fewer muxer frames and
// TLS records per delegation. This changes no byte on the wire.
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
//	2026-11-22  1.2                   Envelope sessions: EnvelopeHeader
//	                                  session_offer (9), session_id (10),
//	                                  stream_seq (11), header version 2;
//	                                  Hello.mac (3); the session ack and
//	                                  reject control frames.
//	2026-11-22  1.3                   Multi-turn delegations:
//	                                  DelegationOffer multi_turn (11) and
//	                                  turn (12, a continuation);
//	                                  DelegationStatus turn (8) and usage
//	                                  (9); ResultProof turns (9); reject
//	                                  reasons not_waiting (12),
//	                                  turn_out_of_order (13),
//	                                  unknown_delegation (14).
//	                                  ResultProof output_sha256 (10): a
//	                                  1.3 provider's proof binds the
//	                                  result's output (OutputDigest).
//	2026-11-27  1.4                   Stream reuse: after a result, the
//	                                  requester may send its next offer on
//	                                  the same stream. No message or field
//	                                  changes.
//	2026-11-27  1.5                   Provisional results:
//	                                  DelegationOffer provisional_result
//	                                  (13), DelegationStatus stored (10).
//	                                  The result may come before the
//	                                  provider's record is durable,
//	                                  confirmed by a stored status.
//	2026-11-29  1.6                   Proof digests: DelegationOffer
//	                                  proof_digest (14), ResultProof
//	                                  digest (11), enum ProofDigest
//	                                  (SHA256 0, BLAKE3 1). A proof may be
//	                                  made with BLAKE3 when the offer asks.
package protocol
