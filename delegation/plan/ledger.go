package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// The decisions ledger is a plan's blackboard. A subtask proposes entries
// in its result; they land as proposals (pending). The plan's owner merges
// or rejects each one. Nothing is rewritten: a merge appends a decision
// that names its proposal, a rejection appends a rejection that does, and
// a slug proposed twice becomes two entries (the second de-collided, slug-2).
// Merged decisions are given to every subtask dispatched later, before its
// task text.

// DecisionMediaType marks a structured result part that carries proposals:
// a file part of this media type whose bytes are one proposal object or an
// array of them.
const DecisionMediaType = "application/vnd.kith.decision+json"

// decisionDataKey is the key of a data part ({"kith_decisions": [...]})
// that carries proposals; a2a data parts carry no media type of their own.
const decisionDataKey = "kith_decisions"

// decisionFence opens a fenced block of proposals in a text result
// ("```kith-decision" … "```"): the convention for executors that return
// text only (exec, openai, echo).
const decisionFence = "```kith-decision"

// Ledger entry kinds.
const (
	KindProposal  = "proposal"
	KindDecision  = "decision"
	KindRejection = "rejection"
)

// Bounds on what one result may propose.
const (
	MaxProposals   = 16
	maxSlugLen     = 64
	maxTypeLen     = 32
	MaxBodyBytes   = 4 << 10
	defaultType    = "decision"
	maxWhyBytes    = 1 << 10
	maxOriginBytes = 64
)

// Errors of the ledger's operations.
var (
	ErrNoEntry     = errors.New("plan: no such ledger entry")
	ErrNotPending  = errors.New("plan: the proposal is no longer pending")
	ErrNeedsReason = errors.New("plan: a rejection needs a reason")
)

// Proposal is what a subtask proposes for the ledger.
type Proposal struct {
	Slug string `json:"slug"`
	Type string `json:"type,omitempty"`
	Body string `json:"body"`
}

var (
	slugRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	typeRE  = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	fenceRE = regexp.MustCompile("(?s)```kith-decision[ \t]*\r?\n(.*?)\r?\n?```")
)

func (p *Proposal) check() error {
	p.Slug = strings.ToLower(strings.TrimSpace(p.Slug))
	p.Type = strings.ToLower(strings.TrimSpace(p.Type))
	if p.Type == "" {
		p.Type = defaultType
	}
	switch {
	case len(p.Slug) > maxSlugLen || !slugRE.MatchString(p.Slug):
		return fmt.Errorf("slug %q: lower-case letters, digits and '-', at most %d", p.Slug, maxSlugLen)
	case len(p.Type) > maxTypeLen || !typeRE.MatchString(p.Type):
		return fmt.Errorf("type %q: lower-case letters, digits, '_' and '-', at most %d", p.Type, maxTypeLen)
	case strings.TrimSpace(p.Body) == "":
		return errors.New("empty body")
	case len(p.Body) > MaxBodyBytes || !utf8.ValidString(p.Body):
		return fmt.Errorf("body of %d bytes: at most %d of UTF-8", len(p.Body), MaxBodyBytes)
	}
	return nil
}

// decodeProposals reads one proposal object or an array of them.
func decodeProposals(b []byte) ([]Proposal, error) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var ps []Proposal
		if err := json.Unmarshal(b, &ps); err != nil {
			return nil, err
		}
		return ps, nil
	}
	var p Proposal
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return []Proposal{p}, nil
}

// Proposals extracts the proposals a result carries: file parts of
// DecisionMediaType, data parts with a "kith_decisions" array, and
// "```kith-decision" blocks in text parts. Every byte of it came from a
// provider: malformed or excess proposals are dropped and described in
// problems, never trusted and never fatal.
func Proposals(parts []protocol.Part) (ps []Proposal, problems []string) {
	add := func(where string, b []byte) {
		got, err := decodeProposals(b)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: not a proposal: %v", where, err))
			return
		}
		for _, p := range got {
			if len(ps) == MaxProposals {
				problems = append(problems, fmt.Sprintf("%s: more than %d proposals; the rest dropped", where, MaxProposals))
				return
			}
			if err := p.check(); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			ps = append(ps, p)
		}
	}
	for i, part := range parts {
		where := fmt.Sprintf("part %d", i)
		switch part.Kind {
		case protocol.PartFile:
			if part.File.MediaType == DecisionMediaType {
				add(where, part.File.Bytes)
			}
		case protocol.PartData:
			var m map[string]json.RawMessage
			if json.Unmarshal(part.Data, &m) == nil && m[decisionDataKey] != nil {
				add(where, m[decisionDataKey])
			}
		case protocol.PartText:
			for _, blk := range fenceRE.FindAllStringSubmatch(part.Text, MaxProposals+1) {
				add(where, []byte(blk[1]))
			}
		}
	}
	return ps, problems
}

// stripProposals removes proposal blocks from an output that goes on as a
// fragment: the proposals reach the ledger, not the next subtask's text.
func stripProposals(s string) string {
	if !strings.Contains(s, decisionFence) {
		return s
	}
	return strings.TrimSpace(fenceRE.ReplaceAllString(s, ""))
}

// proposalEntries turns proposals into ledger entries, de-colliding each
// slug against every proposal already in the ledger and in this batch.
func proposalEntries(ledger []store.PlanEntry, ps []Proposal, subtask string, d protocol.DelegationID) []store.PlanEntry {
	used := map[string]bool{}
	for _, e := range ledger {
		if e.Kind == KindProposal {
			used[e.Slug] = true
		}
	}
	out := make([]store.PlanEntry, 0, len(ps))
	for _, p := range ps {
		slug := decollide(p.Slug, used)
		used[slug] = true
		out = append(out, store.PlanEntry{Kind: KindProposal, Slug: slug, Type: p.Type, Body: p.Body, Subtask: subtask, Delegation: d})
	}
	return out
}

// decollide returns slug, or slug-2, slug-3… whichever is not yet used.
func decollide(slug string, used map[string]bool) string {
	if !used[slug] {
		return slug
	}
	for n := 2; ; n++ {
		s := slug + "-" + strconv.Itoa(n)
		if !used[s] {
			return s
		}
	}
}

// Status is where a proposal stands.
type Status string

const (
	Pending  Status = "pending"
	Merged   Status = "merged"
	Rejected Status = "rejected"
)

// Entry is a ledger entry with, for a proposal, its status and the entry
// that settled it.
type Entry struct {
	store.PlanEntry
	Status    Status `json:"status,omitempty"`
	SettledBy uint64 `json:"settled_by,omitempty"`
}

// settle returns the ledger with each proposal's status.
func settle(ledger []store.PlanEntry) []Entry {
	by := map[uint64]store.PlanEntry{}
	for _, e := range ledger {
		if e.Kind != KindProposal && e.Ref != 0 {
			if _, first := by[e.Ref]; !first {
				by[e.Ref] = e
			}
		}
	}
	out := make([]Entry, len(ledger))
	for i, e := range ledger {
		out[i].PlanEntry = e
		if e.Kind != KindProposal {
			continue
		}
		out[i].Status = Pending
		if s, ok := by[e.Seq]; ok {
			out[i].SettledBy = s.Seq
			out[i].Status = Merged
			if s.Kind == KindRejection {
				out[i].Status = Rejected
			}
		}
	}
	return out
}

// decisions returns the merged decisions, oldest first.
func decisions(ledger []store.PlanEntry) []store.PlanEntry {
	var out []store.PlanEntry
	for _, e := range ledger {
		if e.Kind == KindDecision {
			out = append(out, e)
		}
	}
	return out
}

// preamble is what a subtask receives before its task text: the decisions
// in force when it is dispatched.
func preamble(ds []store.PlanEntry) string {
	if len(ds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Decisions in force for this plan (respect them):\n")
	for _, d := range ds {
		fmt.Fprintf(&b, "- %s (%s): %s\n", d.Slug, d.Type, strings.TrimSpace(d.Body))
	}
	b.WriteString("\n")
	return b.String()
}

// findProposal resolves ref (an entry number, or a proposal's slug).
func findProposal(ledger []store.PlanEntry, ref string) (store.PlanEntry, error) {
	ref = strings.TrimPrefix(strings.TrimSpace(ref), "#")
	if n, err := strconv.ParseUint(ref, 10, 64); err == nil {
		for _, e := range ledger {
			if e.Seq == n {
				if e.Kind != KindProposal {
					return e, fmt.Errorf("%w: entry %d is a %s, not a proposal", ErrNoEntry, n, e.Kind)
				}
				return e, nil
			}
		}
		return store.PlanEntry{}, fmt.Errorf("%w: %d", ErrNoEntry, n)
	}
	for _, e := range ledger {
		if e.Kind == KindProposal && e.Slug == ref {
			return e, nil
		}
	}
	return store.PlanEntry{}, fmt.Errorf("%w: no proposal with slug %q", ErrNoEntry, ref)
}

// settleEntry builds the decision or rejection that settles the proposal
// ref names; the ledger is read in the transaction that appends it.
func settleEntry(kind, ref, why, origin string) func([]store.PlanEntry) ([]store.PlanEntry, error) {
	return func(ledger []store.PlanEntry) ([]store.PlanEntry, error) {
		p, err := findProposal(ledger, ref)
		if err != nil {
			return nil, err
		}
		for _, e := range settle(ledger) {
			if e.Seq == p.Seq && e.Status != Pending {
				return nil, fmt.Errorf("%w: entry %d (%s) is already %s by entry %d", ErrNotPending, p.Seq, p.Slug, e.Status, e.SettledBy)
			}
		}
		e := store.PlanEntry{Kind: kind, Slug: p.Slug, Type: p.Type, Ref: p.Seq, Why: why, Origin: origin, Subtask: p.Subtask}
		if kind == KindDecision {
			used := map[string]bool{}
			for _, d := range decisions(ledger) {
				used[d.Slug] = true
			}
			e.Slug = decollide(p.Slug, used)
			e.Body = p.Body
		}
		return []store.PlanEntry{e}, nil
	}
}
