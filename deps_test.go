package kith

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kithmesh/kith"

// allowed lists, for each top-level package, the module packages it may
// import (directly or not). Sub-packages inherit their parent's rules and
// may import their own parent. A package not listed here fails the test,
// so a new package needs a rule. Each package under internal/ is a unit of
// its own (internal/backoff, not internal), so internal/ never becomes a
// grab-bag that everything may import.
var allowed = map[string][]string{
	"crypto":    {},
	"gpu":       {},
	"protocol":  {"crypto"},
	"store":     {"protocol", "crypto", "internal/promread"},
	"discovery": {"protocol", "crypto", "internal/promread"},
	"delegation": {
		"protocol", "crypto", "store", "gpu", "internal/backoff", "internal/promread",
	},
	"node": {"delegation", "discovery", "store", "protocol", "crypto", "gpu", "internal/backoff", "internal/promread"},
	// The retry schedule of the long-running loops; a leaf.
	"internal/backoff": {},
	// Reads the node's own Prometheus counters back in process; a leaf.
	"internal/promread": {},
	// Helpers for tests only: no package's non-test code may import it,
	// which is why no rule lists it.
	"internal/labtest": {},
	"cmd":              {"node", "delegation", "discovery", "store", "protocol", "crypto", "gpu", "internal/backoff", "internal/promread"}, // through node only: TestCmdImportsOnlyNode
	"":                 {},                                                                                                                 // the module root (this package)
}

type goPackage struct {
	ImportPath string
	Deps       []string
	Imports    []string
	Doc        string
	Name       string
	GoFiles    []string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// topLevel maps ".../kith/store/x" to "store", ".../kith/internal/backoff/x"
// to "internal/backoff", and the module root to "".
func topLevel(importPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
	top, rest, _ := strings.Cut(rel, "/")
	if top == "internal" {
		sub, _, _ := strings.Cut(rest, "/")
		return top + "/" + sub
	}
	return top
}

// cmdDirect lists what cmd/kith may import directly from the module: node
// and its sub-packages (the API client among them).
var cmdDirect = []string{"node"}

// TestCmdImportsOnlyNode: the CLI reaches the rest of the module only
// through node (and the API client), never protocol, store, crypto or
// delegation directly; their transitive use through node is fine.
func TestCmdImportsOnlyNode(t *testing.T) {
	for _, problem := range cmdViolations(listPackages(t)) {
		t.Error(problem)
	}
}

// The check itself catches what "kith dnssd" once did: importing discovery.
func TestCmdCheckerCatchesDiscovery(t *testing.T) {
	pkgs := []goPackage{
		{ImportPath: module + "/cmd/kith", Imports: []string{"fmt", module + "/node", module + "/node/api", module + "/discovery"}},
	}
	if got := cmdViolations(pkgs); len(got) != 1 || !strings.Contains(got[0], "/discovery") {
		t.Fatalf("want one violation naming discovery, got %q", got)
	}
}

func cmdViolations(pkgs []goPackage) []string {
	var problems []string
	for _, p := range pkgs {
		if topLevel(p.ImportPath) != "cmd" {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if top := topLevel(imp); !slices.Contains(cmdDirect, top) {
				problems = append(problems, fmt.Sprintf("%s imports %s directly; go through node (or node/api)", p.ImportPath, imp))
			}
		}
	}
	return problems
}

// TestWireTypesStayInProtocol: the generated protobuf types are protocol's
// business; everything above it works with domain types and explicit
// conversions (STYLE 3).
func TestWireTypesStayInProtocol(t *testing.T) {
	for _, p := range listPackages(t) {
		if topLevel(p.ImportPath) == "protocol" {
			continue
		}
		if slices.Contains(p.Imports, module+"/protocol/pb") {
			t.Errorf("%s imports protocol/pb; use protocol's domain types", p.ImportPath)
		}
	}
}

func TestImportDirection(t *testing.T) {
	for _, problem := range importViolations(listPackages(t)) {
		t.Error(problem)
	}
}

// The checker itself must catch a violation and an unlisted package.
func TestImportCheckerCatchesViolations(t *testing.T) {
	pkgs := []goPackage{
		{ImportPath: module + "/crypto", Deps: []string{module + "/protocol", "fmt"}},
		{ImportPath: module + "/protocol/pb", Deps: []string{module + "/protocol", module + "/crypto"}},
		{ImportPath: module + "/util", Deps: nil},
		{ImportPath: module + "/node", Deps: []string{module + "/internal/labtest", module + "/internal/backoff"}},
		{ImportPath: module + "/internal/grabbag", Deps: nil},
	}
	got := importViolations(pkgs)
	if len(got) != 4 {
		t.Fatalf("want 4 violations (crypto→protocol, unlisted util, node→labtest, unlisted internal/grabbag), got %q", got)
	}
}

func importViolations(pkgs []goPackage) []string {
	var problems []string
	for _, p := range pkgs {
		top := topLevel(p.ImportPath)
		rules, ok := allowed[top]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: top-level package %q has no import rule in deps_test.go", p.ImportPath, top))
			continue
		}
		for _, dep := range p.Deps {
			if dep != module && !strings.HasPrefix(dep, module+"/") {
				continue
			}
			dt := topLevel(dep)
			if dt == top {
				continue // within the package's own tree
			}
			ok := false
			for _, a := range rules {
				if a == dt {
					ok = true
				}
			}
			if !ok {
				problems = append(problems, fmt.Sprintf("%s imports %s: %q may not depend on %q (DESIGN.md, Module and packages)", p.ImportPath, dep, top, dt))
			}
		}
	}
	return problems
}

// Every package opens with a doc comment that says what it owns.
func TestEveryPackageHasDocComment(t *testing.T) {
	for _, p := range listPackages(t) {
		if len(p.GoFiles) == 0 {
			continue
		}
		doc := strings.TrimSpace(p.Doc)
		if doc == "" {
			t.Errorf("%s has no package doc comment", p.ImportPath)
			continue
		}
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command "
		}
		if !strings.HasPrefix(doc, want) {
			t.Errorf("%s: doc comment should start with %q, got %q", p.ImportPath, want, doc)
		}
	}
}
