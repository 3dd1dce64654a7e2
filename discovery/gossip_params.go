package discovery

import (
	"cmp"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// gossipParams are gossipsub's parameters for the advert topics, with every
// timer scaled to heartbeat (zero: gossipsub's one second).
//
// The per-profile topics are small (their providers, up to the push limit,
// and the nodes that use them) and carry a few small messages a minute, so
// what costs is not the mesh but what multiplies with it: every node
// receives about D copies of every advert, and each heartbeat sends IHAVE
// lists to peers outside the mesh. The new design keeps the mesh small
// (D 4, between 3 and 8), sends IHAVE only to Dlazy = 3 peers, never to a
// share of all topic peers (gossip factor 0: with the DHT's 150–230
// connections, the default 0.25 made IHAVE most of the traffic), and keeps
// two heartbeats of history for it. The legacy design keeps gossipsub's
// defaults, as kith did.
func gossipParams(legacy bool, heartbeat time.Duration) pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	if !legacy {
		p.D, p.Dlo, p.Dhi, p.Dscore, p.Dout = 4, 3, 8, 2, 1
		p.Dlazy = 3
		p.GossipFactor = 0
		p.HistoryGossip, p.HistoryLength = 2, 4
	}
	if heartbeat <= 0 || heartbeat == p.HeartbeatInterval {
		return p
	}
	scale := func(d time.Duration) time.Duration {
		return max(time.Duration(float64(d)*float64(heartbeat)/float64(p.HeartbeatInterval)), time.Millisecond)
	}
	p.HeartbeatInitialDelay = scale(p.HeartbeatInitialDelay)
	p.FanoutTTL = scale(p.FanoutTTL)
	p.PruneBackoff = scale(p.PruneBackoff)
	p.UnsubscribeBackoff = scale(p.UnsubscribeBackoff)
	p.GraftFloodThreshold = scale(p.GraftFloodThreshold)
	p.IWantFollowupTime = scale(p.IWantFollowupTime)
	p.HeartbeatInterval = heartbeat
	return p
}

// maxPeerTopics caps the advert topics recorded for one peer: a provider
// of every profile it may advertise that also requests as many.
const maxPeerTopics = 2 * protocol.MaxProfiles

// subscriptionFilter records the subscriptions of allowed peers to advert
// topics (Topic and ProfileTopic's form), and nothing else: no other
// topic, no peer that is denied, and no more than maxPeerTopics per peer,
// so that no peer can grow gossipsub's topic table without bound. Its
// count of a peer's topics is dropped when the peer disconnects, as
// gossipsub drops the subscriptions.
type subscriptionFilter struct {
	allowed func(peer.ID) bool
	h       host.Host
	notify  *network.NotifyBundle

	mu     sync.Mutex
	topics map[peer.ID]map[string]bool
}

func newSubscriptionFilter(h host.Host, allowed func(peer.ID) bool) *subscriptionFilter {
	f := &subscriptionFilter{allowed: allowed, h: h, topics: map[peer.ID]map[string]bool{}}
	f.notify = &network.NotifyBundle{DisconnectedF: func(n network.Network, c network.Conn) {
		if n.Connectedness(c.RemotePeer()) != network.Connected {
			f.mu.Lock()
			delete(f.topics, c.RemotePeer())
			f.mu.Unlock()
		}
	}}
	h.Network().Notify(f.notify)
	return f
}

func (f *subscriptionFilter) stop() {
	if f != nil {
		f.h.Network().StopNotify(f.notify)
	}
}

func (*subscriptionFilter) CanSubscribe(topic string) bool { return validTopic(topic) }

func (f *subscriptionFilter) FilterIncomingSubscriptions(from peer.ID, subs []*pb.RPC_SubOpts) ([]*pb.RPC_SubOpts, error) {
	// An error would drop the whole RPC, messages included, before the
	// validator could count them; an empty list drops only the
	// subscriptions.
	if !f.allowed(from) {
		return nil, nil
	}
	subs = pubsub.FilterSubscriptions(subs, validTopic)
	// FilterSubscriptions returns them in map order: count the
	// unsubscriptions first, so that a peer at the cap that leaves one topic
	// and joins another in one RPC is not refused the new one.
	slices.SortStableFunc(subs, func(a, b *pb.RPC_SubOpts) int {
		return cmp.Compare(btoi(a.GetSubscribe()), btoi(b.GetSubscribe()))
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	mine := f.topics[from]
	if mine == nil {
		mine = map[string]bool{}
		f.topics[from] = mine
	}
	out := subs[:0]
	for _, s := range subs {
		t := s.GetTopicid()
		switch {
		case !s.GetSubscribe():
			delete(mine, t)
		case !mine[t] && len(mine) >= maxPeerTopics:
			continue
		default:
			mine[t] = true
		}
		out = append(out, s)
	}
	return out, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
