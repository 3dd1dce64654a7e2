package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/pelletier/go-toml/v2"

	"github.com/kithmesh/kith/protocol"
)

// Limits on a plan file. A plan is written by its owner, but it is still
// bytes from outside: every list and string is bounded.
const (
	MaxSpecBytes   = 1 << 20
	MaxSubtasks    = 256
	MaxAttempts    = 10
	maxIDLen       = 48
	maxAfter       = MaxSubtasks
	defaultRetries = 2
)

// AssembleID is the ID the assemble step runs under; no subtask may take it.
const AssembleID = "assemble"

// ErrInvalid wraps every problem found in a plan file; the text names the
// field (subtasks[2].after[0]) and the rule.
var ErrInvalid = errors.New("plan: invalid plan")

// Spec is a plan file: subtasks with dependency edges, a plan budget, a
// retry policy and an assemble step. docs/plans.md is its schema.
type Spec struct {
	Name string `json:"name,omitempty" toml:"name,omitempty"`
	// Budget is the plan's token budget; subtasks share it and never
	// exceed it together.
	Budget uint64 `json:"budget" toml:"budget"`
	// Timeout is each subtask's timeout unless it sets its own; 0: the
	// engine's default.
	Timeout  Duration  `json:"timeout,omitzero" toml:"timeout,omitempty"`
	Retry    Retry     `json:"retry,omitzero" toml:"retry,omitempty"`
	Subtasks []Subtask `json:"subtasks" toml:"subtasks"`
	Assemble *Step     `json:"assemble,omitempty" toml:"assemble,omitempty"`
}

// Retry is what happens when a subtask's delegation fails.
type Retry struct {
	// Attempts is how many delegations one subtask may take, the first
	// included (1 to MaxAttempts; 2 if unset).
	Attempts int `json:"attempts,omitempty" toml:"attempts,omitempty"`
	// SamePeer lets a retry go to a provider that already failed this
	// subtask; by default it is re-offered to another one.
	SamePeer bool `json:"same_peer,omitempty" toml:"same_peer,omitempty"`
}

// Step is what runs one subtask, or the assemble step.
type Step struct {
	Profile string `json:"profile" toml:"profile"`
	// Task is the task text. {{outputs.ID}} stands for the output of
	// subtask ID, which must be one this step depends on.
	Task string `json:"task,omitempty" toml:"task,omitempty"`
	// Budget in tokens; 0 takes an equal share of what the plan's budget
	// leaves after the steps that name theirs.
	Budget uint64 `json:"budget,omitempty" toml:"budget,omitempty"`
	// Peer pins the step to one provider (its peer ID); MinTrust only lets
	// providers this node trusts at least that much run it.
	Peer     string   `json:"peer,omitempty" toml:"peer,omitempty"`
	MinTrust string   `json:"min_trust,omitempty" toml:"min_trust,omitempty"`
	Timeout  Duration `json:"timeout,omitzero" toml:"timeout,omitempty"`
}

// Subtask is one bounded piece of the plan.
type Subtask struct {
	ID    string   `json:"id" toml:"id"`
	After []string `json:"after,omitempty" toml:"after,omitempty"`
	Step
}

// Duration is a time.Duration written as text ("90s", "5m").
type Duration time.Duration

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Parse decodes a plan file, strictly: unknown keys are errors. The format
// is TOML or JSON, chosen by name's extension (.toml, .json); any other
// name is JSON when the text starts with '{' and TOML otherwise. Parse
// does not validate; Validate does.
func Parse(name string, data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(data), MaxSpecBytes)
	}
	var s Spec
	isJSON := strings.EqualFold(filepath.Ext(name), ".json") ||
		(!strings.EqualFold(filepath.Ext(name), ".toml") && bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")))
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%w: %s: text after the plan object", ErrInvalid, name)
		}
		return &s, nil
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return nil, fmt.Errorf("%w: %s: %s", ErrInvalid, name, strings.TrimSpace(sm.String()))
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	return &s, nil
}

// JSON is the plan in its canonical form: what the store keeps and the
// API shows.
func (s *Spec) JSON() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a Spec always encodes: plain fields only
	}
	return b
}

var (
	idRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	refRE  = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)
	outRef = "outputs."
)

// refs returns the subtask IDs a task text takes outputs from, and the
// placeholders it does not understand.
func refs(task string) (ids, unknown []string) {
	for _, m := range refRE.FindAllStringSubmatch(task, -1) {
		if id, ok := strings.CutPrefix(m[1], outRef); ok {
			ids = append(ids, id)
		} else {
			unknown = append(unknown, m[0])
		}
	}
	return ids, unknown
}

// Validate checks the plan on its own (no network): IDs, profiles, edges,
// that it is a DAG, references, budgets and the retry policy. It returns
// every problem at once, each naming its field, wrapping ErrInvalid; on
// success it fills in the budgets left to share and the retry default.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, a...)))
	}
	if s.Budget == 0 {
		bad("budget", "the plan needs a token budget")
	}
	if s.Timeout < 0 {
		bad("timeout", "negative")
	}
	switch {
	case s.Retry.Attempts == 0:
		s.Retry.Attempts = defaultRetries
	case s.Retry.Attempts < 0 || s.Retry.Attempts > MaxAttempts:
		bad("retry.attempts", "%d, want 1 to %d", s.Retry.Attempts, MaxAttempts)
	}
	if len(s.Subtasks) == 0 {
		bad("subtasks", "a plan needs at least one subtask")
	}
	if len(s.Subtasks) > MaxSubtasks {
		bad("subtasks", "%d subtasks, at most %d", len(s.Subtasks), MaxSubtasks)
		return errors.Join(errs...)
	}
	index := make(map[string]int, len(s.Subtasks))
	for i, st := range s.Subtasks {
		f := fmt.Sprintf("subtasks[%d]", i)
		switch {
		case st.ID == "":
			bad(f+".id", "missing")
		case len(st.ID) > maxIDLen || !idRE.MatchString(st.ID):
			bad(f+".id", "%q: use letters, digits, '.', '_' and '-' (at most %d)", st.ID, maxIDLen)
		case st.ID == AssembleID:
			bad(f+".id", "%q is the assemble step's", st.ID)
		default:
			if j, dup := index[st.ID]; dup {
				bad(f+".id", "duplicate id %q (also subtasks[%d])", st.ID, j)
			} else {
				index[st.ID] = i
			}
		}
		if strings.TrimSpace(st.Task) == "" {
			bad(f+".task", "empty")
		}
		if len(st.After) > maxAfter {
			bad(f+".after", "%d edges, at most %d", len(st.After), maxAfter)
		}
		s.checkStep(f, st.Step, bad)
	}
	for i, st := range s.Subtasks {
		for j, a := range st.After {
			if _, ok := index[a]; !ok {
				bad(fmt.Sprintf("subtasks[%d].after[%d]", i, j), "no subtask %q", a)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // edges to nowhere make the graph checks meaningless
	}
	if cyc := findCycle(s.Subtasks, index); cyc != nil {
		bad("subtasks", "the dependencies form a cycle: %s (each runs after the next)", strings.Join(cyc, " → "))
		return errors.Join(errs...)
	}
	anc := ancestors(s.Subtasks, index)
	for i, st := range s.Subtasks {
		ids, unknown := refs(st.Task)
		for _, u := range unknown {
			bad(fmt.Sprintf("subtasks[%d].task", i), "unknown placeholder %s (only {{outputs.ID}})", u)
		}
		for _, id := range ids {
			if _, ok := index[id]; !ok {
				bad(fmt.Sprintf("subtasks[%d].task", i), "{{outputs.%s}}: no subtask %q", id, id)
			} else if !anc[i][id] {
				bad(fmt.Sprintf("subtasks[%d].task", i), "{{outputs.%s}}: %q is not among its dependencies (add it to after)", id, id)
			}
		}
	}
	if s.Assemble != nil {
		s.checkStep("assemble", *s.Assemble, bad)
		ids, unknown := refs(s.Assemble.Task)
		for _, u := range unknown {
			bad("assemble.task", "unknown placeholder %s (only {{outputs.ID}})", u)
		}
		for _, id := range ids {
			if _, ok := index[id]; !ok {
				bad("assemble.task", "{{outputs.%s}}: no subtask %q", id, id)
			}
		}
	}
	if err := s.shareBudget(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Spec) checkStep(f string, st Step, bad func(field, format string, a ...any)) {
	if err := protocol.CheckProfileName(st.Profile); err != nil {
		bad(f+".profile", "%v", err)
	}
	if st.Peer != "" {
		if _, err := peer.Decode(st.Peer); err != nil {
			bad(f+".peer", "%q is not a peer ID: %v", st.Peer, err)
		}
	}
	if st.MinTrust != "" {
		if _, err := protocol.ParseTrustLevel(st.MinTrust); err != nil {
			bad(f+".min_trust", "%v", err)
		}
	}
	if st.Timeout < 0 {
		bad(f+".timeout", "negative")
	}
}

// steps returns every step of the plan (the assemble step last), so that
// budgets can be shared over them.
func (s *Spec) steps() []*Step {
	out := make([]*Step, 0, len(s.Subtasks)+1)
	for i := range s.Subtasks {
		out = append(out, &s.Subtasks[i].Step)
	}
	if s.Assemble != nil {
		out = append(out, s.Assemble)
	}
	return out
}

// shareBudget checks that the budgets named fit the plan's, then gives the
// steps without one an equal share of the rest.
func (s *Spec) shareBudget() error {
	var named uint64
	var unset []*Step
	for _, st := range s.steps() {
		if st.Budget == 0 {
			unset = append(unset, st)
			continue
		}
		if named+st.Budget < named {
			return fmt.Errorf("%w: budgets overflow", ErrInvalid)
		}
		named += st.Budget
	}
	if named > s.Budget {
		return fmt.Errorf("%w: budget: the subtasks' budgets sum to %d tokens, over the plan's %d", ErrInvalid, named, s.Budget)
	}
	if len(unset) == 0 {
		return nil
	}
	share := (s.Budget - named) / uint64(len(unset))
	if share == 0 {
		return fmt.Errorf("%w: budget: %d tokens left for %d steps without a budget", ErrInvalid, s.Budget-named, len(unset))
	}
	for _, st := range unset {
		st.Budget = share
	}
	return nil
}

// step returns the step with id (AssembleID for the assemble step).
func (s *Spec) step(id string) (*Step, bool) {
	if id == AssembleID && s.Assemble != nil {
		return s.Assemble, true
	}
	for i := range s.Subtasks {
		if s.Subtasks[i].ID == id {
			return &s.Subtasks[i].Step, true
		}
	}
	return nil, false
}

// Profiles lists the profiles the plan needs, each once, in plan order.
func (s *Spec) Profiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, st := range s.steps() {
		if !seen[st.Profile] {
			seen[st.Profile] = true
			out = append(out, st.Profile)
		}
	}
	return out
}
