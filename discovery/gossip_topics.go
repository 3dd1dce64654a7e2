package discovery

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// join subscribes to topic name (that of profile, or Topic), if it has not
// yet, and applies mark to its entry.
func (g *Gossip) join(name, profile string, mark func(*joined)) error {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	if g.closed {
		return errGossipClosed
	}
	if j, ok := g.topics[name]; ok {
		mark(j)
		return nil
	}
	if err := g.ps.RegisterTopicValidator(name, g.validate); err != nil {
		return err
	}
	t, err := g.ps.Join(name)
	if err != nil {
		_ = g.ps.UnregisterTopicValidator(name)
		return err
	}
	sub, err := t.Subscribe()
	if err != nil {
		_ = t.Close()
		_ = g.ps.UnregisterTopicValidator(name)
		return err
	}
	j := &joined{profile: profile, topic: t, sub: sub, done: make(chan struct{})}
	mark(j)
	g.topics[name] = j
	go g.receive(name, j)
	return nil
}

var errGossipClosed = errors.New("gossip closed")

// leaveLocked unsubscribes from a topic and waits for its receive loop.
func (g *Gossip) leaveLocked(name string, j *joined) error {
	j.sub.Cancel()
	<-j.done
	err := j.topic.Close()
	if g.ctx.Err() != nil {
		err = nil // gossipsub has stopped: nothing is left to leave
	}
	_ = g.ps.UnregisterTopicValidator(name)
	delete(g.topics, name)
	g.mu.Lock()
	delete(g.authors, name)
	g.mu.Unlock()
	return err
}

// Serve makes the profiles this node offers exactly profiles: it joins the
// topics of new ones and leaves those of profiles it neither offers nor
// wants any more. The legacy design has one topic and ignores it.
func (g *Gossip) Serve(profiles []string) error {
	if g.legacy {
		return nil
	}
	var errs []error
	for _, p := range profiles {
		if err := g.join(ProfileTopic(p), p, func(j *joined) { j.serve = true }); err != nil {
			errs = append(errs, fmt.Errorf("discovery: join the topic of %q: %w", p, err))
		}
	}
	g.tmu.Lock()
	for name, j := range g.topics {
		if j.profile != "" && !slices.Contains(profiles, j.profile) {
			j.serve = false
		}
		if name != Topic && !j.serve && !g.now().Before(j.wantUntil) {
			errs = append(errs, g.leaveLocked(name, j))
		}
	}
	g.tmu.Unlock()
	return errors.Join(errs...)
}

// Want joins the topic of profile, which this node requests, for WantFor
// from now: the adverts of its providers then reach this node. Call it on
// every request; Serve (called by Run) leaves topics no longer wanted.
func (g *Gossip) Want(profile string) error {
	if g.legacy {
		return nil
	}
	if err := protocol.CheckProfileName(profile); err != nil {
		return fmt.Errorf("discovery: want %q: %w", profile, err)
	}
	until := g.now().Add(g.wantFor)
	if err := g.join(ProfileTopic(profile), profile, func(j *joined) { j.wantUntil = until }); err != nil {
		return fmt.Errorf("discovery: join the topic of %q: %w", profile, err)
	}
	return nil
}

// Topics returns the topics this node subscribes to, sorted.
func (g *Gossip) Topics() []string {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	return slices.Sorted(maps.Keys(g.topics))
}

// TopicPeers is how many peers this node knows to be on the topics it
// subscribes to, counting a peer once per topic.
func (g *Gossip) TopicPeers() int {
	g.tmu.Lock()
	joins := slices.Collect(maps.Values(g.topics))
	g.tmu.Unlock()
	n := 0
	for _, j := range joins {
		n += len(j.topic.ListPeers())
	}
	return n
}

// topicPeers lists the peers this node knows to be on topic name.
func (g *Gossip) topicPeers(name string) []peer.ID {
	g.tmu.Lock()
	j, ok := g.topics[name]
	g.tmu.Unlock()
	if !ok {
		return nil
	}
	return j.topic.ListPeers()
}
