package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/libp2p/go-libp2p/core/peer"
)

// maxCardBytes bounds a fetched agent card.
const maxCardBytes = 1 << 20

// FetchCard reads an agent card from url: a card's URL, or an agent's base
// URL to which /.well-known/agent-card.json is added.
func FetchCard(ctx context.Context, hc *http.Client, url string) (*a2a.AgentCard, error) {
	if !strings.HasSuffix(url, ".json") {
		url = strings.TrimSuffix(url, "/") + "/.well-known/agent-card.json"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCardBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCardBytes {
		return nil, fmt.Errorf("GET %s: card over %d bytes", url, maxCardBytes)
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(b, &card); err != nil {
		return nil, fmt.Errorf("GET %s: not an agent card: %w", url, err)
	}
	return &card, nil
}

// CardPeer is the peer ID a card names in kith's peer extension, if any.
func CardPeer(card *a2a.AgentCard) (peer.ID, bool) {
	for _, e := range card.Capabilities.Extensions {
		if e.URI != PeerExtension {
			continue
		}
		s, _ := e.Params["peerId"].(string)
		p, err := peer.Decode(s)
		return p, err == nil
	}
	return "", false
}

// VerifyKithCard checks a card's signature and, when the card names a kith
// peer, that the peer signed it.
func VerifyKithCard(card *a2a.AgentCard) (peer.ID, error) {
	signer, err := VerifyCard(card)
	if err != nil {
		return "", err
	}
	if named, ok := CardPeer(card); ok && named != signer {
		return signer, fmt.Errorf("%w: the card names peer %s but %s signed it", ErrBadSignature, named, signer)
	}
	return signer, nil
}
