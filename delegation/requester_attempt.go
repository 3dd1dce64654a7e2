package delegation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// One attempt at a provider, the requester's side: a stream opened (or one
// kept from an earlier delegation, streampool.go), the offer or a reattach
// query sent on it, and the stream followed (requester_reader.go) until the
// delegation ends here or the stream fails. follow (requester.go) drives
// the attempts.

// outcome is how one attempt at a provider ended.
type outcome int

const (
	outcomeRetry     outcome = iota // no stream to the provider: try again
	outcomeConnected                // a stream worked, then failed: reattach
	outcomeDone                     // the delegation is terminal here
	outcomePreempted                // the provider preempted it: offer it elsewhere
	outcomeStale                    // a kept stream had gone (streampool.go): offer again on a new one
	outcomeRefused                  // a new stream was over a stream limit while others were open: wait for a place (streamgate.go)
)

// attempt opens one stream to the provider, sends the offer (or, once the
// provider has accepted, a status query to reattach), and follows the
// stream. The error says why an attempt that did not end the delegation
// failed.
//
// A fresh attempt is the first one of a delegation just offered: it starts
// from d as Delegate built it, reading nothing back. cr is the write of d:
// the provider's answer is read and checked while it goes on, and nothing
// of it is written, or reported, before it is done (providerReader.cr).
//
// An offer goes out on a stream kept from an earlier delegation to the same
// provider when there is one (streampool.go), unless noKept: the last
// attempt's kept stream turned out gone.
func (e *requesterHalf) attempt(ctx context.Context, d store.Delegation, o *outgoing, lost *pathLoss, fresh bool, cr *created, noKept bool) (outcome, error) {
	o.replyMu.Lock()
	locked := true
	defer func() {
		if locked {
			o.replyMu.Unlock()
		}
	}()
	cur := d
	var all []store.Event
	if !fresh {
		var err error
		if cur, err = e.st.GetDelegation(store.RoleRequester, d.ID); err != nil {
			return outcomeDone, err
		}
		if cur.State.Terminal() {
			return outcomeDone, nil
		}
		d = cur // the provider may have changed (a re-offer)
		if all, err = e.st.Events(store.RoleRequester, d.ID, 0); err != nil {
			return outcomeRetry, err
		}
	}
	r := &providerReader{e: e, d: d, cr: cr, offerHash: o.offerHash, statuses: rate.NewLimiter(statusRate, statusBurst),
		provisional: protocol.OfferAsksProvisional(cur.Offer) && e.speaks(d.Peer, protocol.ProvisionalResults)}
	r.events = slices.Clone(currentAttempt(all))
	r.moved = reoffered(all)
	for _, ev := range r.events {
		switch ev.Type {
		case EventAccepted:
			r.accepted = true
		case EventStatus:
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				st := m.(*protocol.DelegationStatus)
				r.lastSeq = max(r.lastSeq, st.Seq)
				r.partial += protocol.PayloadSize(st.Partial)
			}
		}
	}
	var first protocol.Message
	if r.accepted {
		first = &protocol.DelegationStatus{ID: d.ID, Query: true, Seq: r.lastSeq}
	} else if e.cfg.Trace != nil {
		// Decoded for the trace only: a large offer goes out as stored.
		offer, err := protocol.DecodeMessage(cur.Offer)
		if err != nil {
			return outcomeDone, err
		}
		first = offer
	}
	var (
		s      Stream
		c      *protocol.Conn
		kept   *idleStream // the stream came from the pool
		opened time.Time   // when this attempt opened s, if it did
		err    error
	)
	if !r.accepted && !noKept {
		if is := e.idle.take(d.Peer); is != nil {
			if is.c.SendEncoded(cur.Offer) == nil {
				s, c, kept = is.s, is.c, is
				r.kept = true
			} else {
				_ = is.s.Reset()
			}
		}
	}
	if kept == nil {
		var handed *idleStream
		if s, handed, err = e.openGated(ctx, d, !r.accepted && !noKept); err != nil {
			e.idle.drop(d.Peer)
			return e.refusedOutcome(d.Peer, err), err
		}
		if handed != nil {
			// Handed on by a delegation that just ended on it while this
			// offer waited for a place (streamgate.go).
			if err := handed.c.SendEncoded(cur.Offer); err != nil {
				_ = handed.s.Reset()
				return outcomeStale, err
			}
			s, c, kept = handed.s, handed.c, handed
			r.kept = true
		} else {
			opened = e.cfg.Now()
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	switch {
	case kept != nil:
	case r.accepted:
		c, err = protocol.Dial(s, e.id, d.Peer, first, e.cfg.Conn)
	default:
		c, err = protocol.DialEncoded(s, e.id, d.Peer, protocol.TypeDelegationOffer, cur.Offer, e.cfg.Conn)
	}
	if err != nil {
		_ = s.Reset()
		e.idle.drop(d.Peer) // a new stream failed: free what the provider counts
		if kept == nil {
			if out := e.refusedOutcome(d.Peer, err); out == outcomeRefused {
				return out, err
			}
		}
		if errors.Is(err, protocol.ErrPayloadTooLarge) || errors.Is(err, protocol.ErrFrameTooLarge) {
			// A local size error: no retry can fix it.
			if cr.wait() != nil {
				return outcomeDone, err
			}
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = ReasonPayloadTooLarge + ": " + err.Error()
			})
			return outcomeDone, err
		}
		return outcomeRetry, err
	}
	if first != nil {
		e.trace(Sent, d.Peer, first)
	}
	if !r.accepted {
		// The offer is out: its hash, which the result's check needs, is
		// done in the background while the provider works.
		o.offerHash.beginIdle()
	}
	if lost != nil || strings.HasPrefix(cur.Reason, waitingPrefix) {
		e.log.Info("path to the provider is back", "delegation", d.ID, "peer", d.Peer)
		_, _ = e.st.UpdateDelegation(store.RoleRequester, d.ID, func(x *store.Delegation) error {
			if strings.HasPrefix(x.Reason, waitingPrefix) {
				x.Reason = ""
			}
			return nil
		})
	}
	r.c = c
	r.buf = &eventBuffer{e: e.core, id: d.ID, cr: cr}
	if turn := pendingTurn(r.events); r.accepted && turn != nil {
		// An answer stored while no stream was up, or whose stream broke
		// before the provider acknowledged it: the provider takes it now,
		// or knows it already and ignores it.
		if err := c.SendEncoded(turn); err != nil {
			_ = s.Reset()
			return outcomeConnected, err
		}
		r.turnSent = true
	}
	e.reqMu.Lock()
	o.conn, o.reader = c, r
	e.reqMu.Unlock()
	o.replyMu.Unlock()
	locked = false
	defer func() {
		e.reqMu.Lock()
		o.conn, o.reader = nil, nil
		e.reqMu.Unlock()
	}()
	// Once the result is in, the provider reads on for our next offer
	// (1.4): the stream goes back to the pool before the result is checked
	// and stored, so that it is there when Wait returns; a stream that
	// carries a provisional result (1.5), once its confirmation has come
	// (provisionalResult).
	r.keepStream = func() bool {
		if !stop() || !e.speaks(d.Peer, protocol.StreamReuse) {
			return false
		}
		if kept == nil {
			kept = &idleStream{s: s, c: c, born: opened}
		}
		kept.uses++
		now := e.cfg.Now()
		if reusable(kept, now) && e.gates.handKept(d.Peer, kept) {
			return true // an offer waiting for a place goes on it
		}
		e.idle.put(d.Peer, kept, now)
		return true
	}
	out, err := r.read()
	switch {
	case r.streamKept:
	case out == outcomeDone:
		_ = s.Close() // closing our side acknowledges the result
	default:
		_ = s.Reset()
		if kept != nil && !r.heard && ctx.Err() == nil {
			return outcomeStale, err
		}
		if kept == nil && !r.heard {
			// A new stream the provider refused (its limit on a peer's
			// streams counts the kept ones): free them for the next try.
			e.idle.drop(d.Peer)
			if out := e.refusedOutcome(d.Peer, err); out == outcomeRefused {
				return out, err
			}
		}
	}
	return out, err
}

// keptAnswerTimeout bounds the wait for a provider's first answer to an
// offer sent on a kept stream. A provider answers within its openDelay (or
// at once, with a reject); one that has let the stream go without closing
// it (an older build reached with a capability assertion from before its
// downgrade) never does, and the offer goes again on a new stream, which
// the provider takes as new or, if it has it after all, as a reattach.
const keptAnswerTimeout = 5 * time.Second

// openGated opens a new delegation stream to d's provider once the stream
// gates give it a place (streamgate.go), waiting at most until d's
// deadline; the place goes back when the stream closes. When takesKept, a
// delegation ending meanwhile may hand on its kept stream instead: that is
// returned, and no stream.
func (e *requesterHalf) openGated(ctx context.Context, d store.Delegation, takesKept bool) (Stream, *idleStream, error) {
	gctx, cancel := ctx, context.CancelFunc(func() {})
	if !d.Deadline.IsZero() {
		gctx, cancel = context.WithDeadline(ctx, d.Deadline)
	}
	handed, err := e.gates.acquire(gctx, d.Peer, takesKept)
	cancel()
	if err != nil || handed != nil {
		return nil, handed, err
	}
	dctx, cancel := context.WithTimeout(ctx, e.cfg.Conn.IOTimeout+time.Second)
	s, err := e.cfg.Dialer.OpenStream(dctx, d.Peer)
	cancel()
	if err != nil {
		e.log.Debug("open stream", "peer", d.Peer, "delegation", d.ID, "err", err)
		e.gates.release(d.Peer)
		return nil, nil, err
	}
	return &gatedStream{Stream: s, release: func() { e.gates.release(d.Peer) }}, nil, nil
}

// refusedOutcome is how an attempt whose new stream failed with err, never
// heard from, ends: outcomeRefused when a stream limit refused it while
// other streams to p are open (backpressure: the gates now hold the next
// stream back until one of them closes), else outcomeRetry. The stream's
// place must be released already.
func (e *requesterHalf) refusedOutcome(p peer.ID, err error) outcome {
	over, remote := overLimit(err)
	if !over {
		return outcomeRetry
	}
	where := "local"
	if remote {
		where = "remote"
	}
	e.m.streamsRefused.WithLabelValues(where).Inc()
	if !e.gates.refused(p) {
		return outcomeRetry
	}
	e.log.Debug("stream over a limit; waiting for a place", "peer", p, "where", where, "err", err)
	return outcomeRefused
}
