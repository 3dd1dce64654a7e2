package gateway

import (
	"encoding/base64"
	"encoding/json"
	"net/http"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

// PeerExtension is the URI of the card extension that names the kith node
// serving the agent; its params carry "peerId".
const PeerExtension = "https://github.com/kithmesh/kith/a2a/peer"

// bearerScheme is the security scheme name cards declare when the
// listener wants the token.
const bearerScheme = "kithToken"

// interfaces are an agent's endpoints, JSON-RPC v1.0 first (what current
// clients pick). The node agent has no HTTP+JSON binding: its paths would
// collide with the profiles' under /a2a/.
func (g *Gateway) interfaces(url string, rest bool) []*a2a.AgentInterface {
	out := []*a2a.AgentInterface{{URL: url, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}}
	if rest {
		out = append(out, &a2a.AgentInterface{URL: url, ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: a2a.Version})
	}
	return append(out, &a2a.AgentInterface{URL: url, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version})
}

func (g *Gateway) baseCard(name, description, url string, rest bool) *a2a.AgentCard {
	base := g.cfg.BaseURL()
	card := &a2a.AgentCard{
		Name: name, Description: description, Version: g.cfg.Version,
		SupportedInterfaces: g.interfaces(url, rest),
		Provider:            &a2a.AgentProvider{Org: "kith node " + g.cfg.Identity.PeerID().String(), URL: base},
		Capabilities: a2a.AgentCapabilities{
			Streaming: true, PushNotifications: false,
			Extensions: []a2a.AgentExtension{{
				URI:         PeerExtension,
				Description: "the kith node (libp2p peer ID) that serves this agent and signs this card",
				Params:      map[string]any{"peerId": g.cfg.Identity.PeerID().String()},
			}},
		},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills:             []a2a.AgentSkill{},
	}
	if g.cfg.TokenRequired {
		card.SecuritySchemes = a2a.NamedSecuritySchemes{bearerScheme: a2a.HTTPAuthSecurityScheme{
			Scheme: "Bearer", Description: "the node's API token: kith api token",
		}}
		card.SecurityRequirements = a2a.SecurityRequirementsOptions{{bearerScheme: a2a.SecuritySchemeScopes{}}}
	}
	return card
}

func skill(p profileInfo) a2a.AgentSkill {
	tags := append([]string{}, p.Skills...)
	if p.Local {
		tags = append(tags, "local")
	}
	if p.Providers > 0 {
		tags = append(tags, "mesh")
	}
	desc := p.Description
	if desc == "" {
		desc = "kith profile " + p.Name
	}
	return a2a.AgentSkill{ID: p.Name, Name: p.Name, Description: desc, Tags: tags}
}

// NodeCard is the node agent's card: one skill per profile it can serve.
func (g *Gateway) NodeCard() (*a2a.AgentCard, error) {
	card := g.baseCard("kith "+g.cfg.Identity.PeerID().String(),
		"A kith mesh node. Each skill is a profile, served here or by a verified peer; "+
			"send to /a2a/<profile>, or here with metadata.profile.", g.cfg.BaseURL()+"/a2a", false)
	for _, p := range g.profiles() {
		card.Skills = append(card.Skills, skill(p))
	}
	return card, SignCard(card, g.cfg.Identity, g.cfg.BaseURL()+"/.well-known/jwks.json")
}

// ProfileCard is the card of one profile's agent; false when the node
// cannot serve the profile.
func (g *Gateway) ProfileCard(name string) (*a2a.AgentCard, bool, error) {
	p, ok := g.profile(name)
	if !ok {
		return nil, false, nil
	}
	desc := p.Description
	if desc == "" {
		desc = "kith profile " + p.Name
	}
	card := g.baseCard(p.Name, desc, g.cfg.BaseURL()+"/a2a/"+p.Name, true)
	card.Skills = []a2a.AgentSkill{skill(p)}
	return card, true, SignCard(card, g.cfg.Identity, g.cfg.BaseURL()+"/.well-known/jwks.json")
}

func (g *Gateway) serveNodeCard(w http.ResponseWriter, _ *http.Request) {
	card, err := g.NodeCard()
	writeCard(w, card, err)
}

func (g *Gateway) serveProfileCard(w http.ResponseWriter, r *http.Request) {
	card, ok, err := g.ProfileCard(r.PathValue("profile"))
	if !ok && err == nil {
		writeProblem(w, http.StatusNotFound, "no agent for profile "+quote(r.PathValue("profile"))+" on this node or its verified peers")
		return
	}
	writeCard(w, card, err)
}

func writeCard(w http.ResponseWriter, card *a2a.AgentCard, err error) {
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Cache-Control", "no-cache")
	_ = json.NewEncoder(w).Encode(card)
}

func (g *Gateway) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	pub := g.cfg.Identity.PublicKey()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
		"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
		"kid": g.cfg.Identity.PeerID().String(), "x": base64.RawURLEncoding.EncodeToString(pub),
	}}})
}
