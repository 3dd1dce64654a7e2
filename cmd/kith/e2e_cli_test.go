package main

// End-to-end tests of the CLI's inputs, outputs and messages (issue 16).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// TestE2EDelegateInputs: the task comes from stdin ("-" or a pipe with no
// TEXT) and from --file, larger than argv allows and larger than the API's
// ordinary body cap; --output writes the result to a file; an absent,
// empty or oversized task is refused before anything is sent.
func TestE2EDelegateInputs(t *testing.T) {
	// echo cuts its answer to the budget (4 bytes a token).
	a, b := pair(t, "[[profiles]]\nname = \"bigecho\"\nexecutor = \"echo\"\nmax_budget_tokens = 1048576\n")
	dir := t.TempDir()
	// 128 KiB overflows one argv string (MAX_ARG_STRLEN); 2 MiB overflows
	// the API's 1 MiB body cap for other routes. Quotes, backslashes and
	// angle brackets make the JSON body larger than the task; no spaces,
	// so echo streams it as one word.
	line := `<a>"task"\`
	small := strings.Repeat(line, 128<<10/len(line)+1)
	big := strings.Repeat(line, 2<<20/len(line)+1)
	bigFile := filepath.Join(dir, "task.txt")
	if err := os.WriteFile(bigFile, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}

	delegate := []string{"delegate", "--profile", "bigecho", "--peer", b.id}
	// echo answers with the task, and the CLI ends stdout with a newline.
	r := a.kithIn(strings.NewReader(small), append(delegate, "-")...)
	r.mustSucceed(t)
	if r.stdout != small+"\n" {
		t.Errorf("delegate - : stdout has %d bytes, want the %d-byte task and a newline", len(r.stdout), len(small))
	}
	r = a.kithIn(strings.NewReader(small), delegate...)
	r.mustSucceed(t)
	if r.stdout != small+"\n" {
		t.Errorf("delegate from a pipe without TEXT: stdout has %d bytes, want %d", len(r.stdout), len(small)+1)
	}

	out := filepath.Join(dir, "result.txt")
	r = a.kith(append(delegate, "--file", bigFile, "--output", out)...)
	r.mustSucceed(t)
	if r.stdout != "" {
		t.Errorf("with --output, stdout should be empty; %d bytes", len(r.stdout))
	}
	if got, err := os.ReadFile(out); err != nil || string(got) != big {
		t.Errorf("--output file: %d bytes (err %v), want exactly the %d-byte task", len(got), err, len(big))
	}
	bigID := delegationID(t, r)
	if d := a.delegation(bigID); d.State.String() != "completed" || d.Output != big {
		t.Errorf("2 MiB delegation: state %s, output of %d bytes; want completed with the task", d.State, len(d.Output))
	}

	// A listing carries a small output, and leaves out one over 64 KiB
	// (it read the records, not the files of large documents); tasks show
	// has it whole (above).
	r = a.kith(append(delegate, "tiny")...)
	r.mustSucceed(t)
	tinyID := delegationID(t, r)
	r = a.kith("tasks", "ls", "--json")
	r.mustSucceed(t)
	var listed []api.Delegation
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, d := range listed {
		switch d.ID {
		case tinyID:
			seen++
			if d.Output != "tiny" || d.OutputOmitted {
				t.Errorf("tasks ls: the small output listed as %q (omitted %v)", d.Output, d.OutputOmitted)
			}
		case bigID:
			seen++
			if d.Output != "" || !d.OutputOmitted {
				t.Errorf("tasks ls: the 2 MiB output listed with %d bytes (omitted %v); want it left out", len(d.Output), d.OutputOmitted)
			}
		}
	}
	if seen != 2 || len(r.stdout) > 64<<10 {
		t.Errorf("tasks ls --json: %d of the two delegations, %d bytes", seen, len(r.stdout))
	}

	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64<<20 + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no task", delegate, "no task: give TEXT, --file PATH, or pipe it on stdin"},
		{"empty file", append(delegate, "--file", os.DevNull), "task from " + os.DevNull + ": empty"},
		{"over 64 MiB", append(delegate, "--file", huge), "more than 64 MiB"},
		{"TEXT and --file", append(delegate, "--file", bigFile, "hello"), "not both"},
		{"missing file", append(delegate, "--file", filepath.Join(dir, "nope")), "--file: open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.kith(c.args...)
			if r.code == 0 || !strings.Contains(r.stderr, c.want) || delegationLine.MatchString(r.stderr) {
				t.Errorf("want a non-zero exit, %q on stderr and no delegation started; %v", c.want, r)
			}
		})
	}
}

// TestE2EScriptable: every listing prints JSON with --json; tasks ls pages
// with --limit, --since and --state and says on stderr when it left
// matches out; an unknown subcommand exits non-zero; errors carry no
// package prefixes.
func TestE2EScriptable(t *testing.T) {
	a, b := pair(t, "")
	var ids []string
	for i := range 3 {
		r := a.kith("delegate", "--profile", "echo", fmt.Sprintf("task %d", i))
		r.mustSucceed(t)
		ids = append(ids, delegationID(t, r))
	}

	decode := func(r result, v any) {
		t.Helper()
		r.mustSucceed(t)
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("not JSON: %v; %v", err, r)
		}
	}
	var ds []api.Delegation
	r := a.kith("tasks", "ls", "--json")
	decode(r, &ds)
	if len(ds) != 3 || ds[0].ID != ids[0] || ds[2].ID != ids[2] || r.stderr != "" {
		t.Errorf("tasks ls --json: %d delegations, want the 3 made, oldest first, and nothing on stderr; %v", len(ds), r)
	}
	r = a.kith("tasks", "ls", "--json", "--limit", "2")
	decode(r, &ds)
	if len(ds) != 2 || ds[0].ID != ids[1] || ds[1].ID != ids[2] || !strings.Contains(r.stderr, "truncated: the newest 2 shown") {
		t.Errorf("tasks ls --limit 2: want the newest 2 and a truncation note on stderr; %v", r)
	}
	r = a.kith("tasks", "ls", "--json", "--limit", "3", "--state", "completed,failed", "--since", "1h")
	decode(r, &ds)
	if len(ds) != 3 || r.stderr != "" {
		t.Errorf("tasks ls --limit 3 --state completed,failed --since 1h: want all 3 and no note; %v", r)
	}
	r = a.kith("tasks", "ls", "--json", "--state", "failed")
	decode(r, &ds)
	if len(ds) != 0 {
		t.Errorf("tasks ls --state failed: want none; %v", r)
	}
	r = a.kith("tasks", "ls", "--since", time.Now().Add(time.Hour).Format(time.RFC3339))
	if r.code != 0 || strings.Contains(r.stdout, ids[0]) {
		t.Errorf("tasks ls --since a future time: want an empty table; %v", r)
	}

	var peers []api.Peer
	decode(a.kith("peers", "ls", "--json"), &peers)
	if len(peers) != 1 || peers[0].ID != b.id || !peers[0].Connected {
		t.Errorf("peers ls --json: %+v; want b, connected", peers)
	}
	a.kith("peers", "trust", b.id, "trusted").mustSucceed(t)
	var audit []api.AuditEntry
	decode(a.kith("peers", "log", "--json"), &audit)
	if len(audit) == 0 || audit[len(audit)-1].Peer != b.id || audit[len(audit)-1].To != "trusted" {
		t.Errorf("peers log --json: %+v; want the last entry to raise b to trusted", audit)
	}
	var info api.NodeInfo
	decode(a.kith("id", "--json"), &info)
	if info.PeerID != a.id || len(info.Addrs) == 0 {
		t.Errorf("id --json: %+v; want a's peer ID and addresses", info)
	}
	var g api.GPU
	decode(a.kith("gpu", "--json"), &g)
	if g.NoGPU == "" && g.Inventory == "" {
		t.Errorf("gpu --json: %+v; want an inventory or the reason there is none", g)
	}
	var d api.Discovery
	decode(a.kith("discover", "--json"), &d)
	if !slices.ContainsFunc(d.Peers, func(p api.DiscoveredPeer) bool { return p.ID == b.id }) {
		t.Errorf("discover --json: %+v; want b among the peers", d)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `unknown command "bogus" for "kith"`},
		{[]string{"peers", "bogus"}, `unknown command "bogus" for "kith peers"`},
		{[]string{"tasks", "lss"}, `unknown command "lss" for "kith tasks"`},
		{[]string{"tasks", "ls", "--state", "done"}, `state "done": not a delegation state`},
		{[]string{"tasks", "ls", "--limit", "-1"}, `limit "-1": want 1 to`},
		{[]string{"tasks", "ls", "--since", "yesterday"}, `--since "yesterday": want a duration`},
		{[]string{"tasks", "show", "nothex"}, "kith: "},
		{[]string{"peers", "trust", b.id, "bogus"}, `trust level "bogus": want untrusted, verified or trusted`},
	} {
		r := a.kith(c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("want a non-zero exit and %q on stderr; %v", c.want, r)
		}
		if m := regexp.MustCompile(`\b(protocol|store|delegation|node|crypto|discovery): `).FindString(r.stderr); m != "" {
			t.Errorf("error names an internal package (%q); %v", m, r)
		}
	}
}

// TestE2ESayWhatHappened: a delegation to a denied peer says so and
// starts nothing; tasks verify on the provider says where proofs are
// verified; peers rm of a denied peer says it lifts the deny; the audit
// log names the CLI as the origin of every change made through it.
func TestE2ESayWhatHappened(t *testing.T) {
	a, b := pair(t, "")
	r := a.kith("delegate", "--profile", "echo", "--peer", b.id, "hi")
	r.mustSucceed(t)
	id := delegationID(t, r)

	r = b.kith("tasks", "verify", id)
	if r.code == 0 || !strings.Contains(r.stderr, "proofs are verified by the requester") || !strings.Contains(r.stderr, a.id) {
		t.Errorf("tasks verify on the provider: want a non-zero exit naming the requester who verifies; %v", r)
	}

	a.kith("peers", "deny", b.id).mustSucceed(t)
	r = a.kith("delegate", "--profile", "echo", "--peer", b.id, "hi")
	if r.code == 0 || !strings.Contains(r.stderr, b.id+" is denied") || delegationLine.MatchString(r.stderr) {
		t.Errorf("delegate to a denied peer: want a non-zero exit, \"is denied\" and no delegation started; %v", r)
	}

	r = a.kith("peers", "rm", b.id)
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, "was denied: forgetting it lifted the deny") {
		t.Errorf("peers rm of a denied peer should say it lifts the deny; %v", r)
	}
	var audit []api.AuditEntry
	r = a.kith("peers", "log", "--json")
	r.mustSucceed(t)
	if err := json.Unmarshal([]byte(r.stdout), &audit); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit {
		actions = append(actions, e.Action)
		if e.Origin != "cli" {
			t.Errorf("audit entry %+v: origin %q, want cli (every change came from the CLI)", e, e.Origin)
		}
	}
	if !slices.Equal(actions, []string{"trust", "access", "delete"}) {
		t.Errorf("audit actions %q, want peers add's trust, the deny, the delete", actions)
	}
}

// TestE2EReadmeRelayRecipe: the README's relay recipe as written: "kith id"
// right after "kith init" prints the peer ID before any daemon runs, and
// the relay's and the home nodes' config blocks pass "kith daemon --check".
func TestE2EReadmeRelayRecipe(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Across the internet")
	if !ok {
		t.Fatal("README has no \"Across the internet\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	if !strings.Contains(section, "./kith init ") || !strings.Contains(section, "./kith id | head -1") {
		t.Fatalf("the recipe no longer runs kith init then kith id:\n%s", section)
	}
	home := filepath.Join(testDir(t), "relay")
	r := runKith(t, "--home", home, "init")
	r.mustSucceed(t)
	relayID := strings.TrimSpace(r.stdout)
	r = runKith(t, "--home", home, "id")
	r.mustSucceed(t)
	if first, _, _ := strings.Cut(r.stdout, "\n"); first != relayID {
		t.Errorf("kith id before the daemon runs: first line %q, want the peer ID %q that init printed; %v", first, relayID, r)
	}

	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 2 {
		t.Fatalf("want the relay's and a home node's toml blocks, found %d", len(blocks))
	}
	for i, b := range blocks {
		file := filepath.Join(home, "config.toml")
		if err := os.WriteFile(file, []byte(strings.ReplaceAll(b[1], "RELAY_ID", relayID)), 0o600); err != nil {
			t.Fatal(err)
		}
		if r := runKith(t, "--home", home, "daemon", "--check"); r.code != 0 || r.stdout != "config ok\n" {
			t.Errorf("README toml block %d fails the check:\n%s\n%v", i, b[1], r)
		}
	}
}

// TestE2EVersionAndLogs: kith version and kith --version print the
// build's version, the daemon reports it in kith status and to peers (the
// user agent), and --log-level and --log-format override the config.
func TestE2EVersionAndLogs(t *testing.T) {
	r := runKith(t, "version")
	r.mustSucceed(t)
	first, _, _ := strings.Cut(r.stdout, "\n")
	version, ok := strings.CutPrefix(first, "kith ")
	if !ok || version == "" || !strings.Contains(r.stdout, "\ngo      go1.") {
		t.Fatalf("kith version: want \"kith <version>\" and the Go version; %v", r)
	}
	if v := runKith(t, "--version"); v.code != 0 || v.stdout != r.stdout {
		t.Errorf("kith --version should print what kith version prints; %v", v)
	}

	dir := testDir(t)
	a := newNode(t, dir, "a", "")
	b := newNode(t, dir, "b", "")
	a.start("--log-format", "json", "--log-level", "debug")
	b.start("--log-level", "warn")
	a.kith("peers", "add", b.addr("/tcp/")).mustSucceed(t)

	var st api.Status
	r = a.kith("status", "--json")
	r.mustSucceed(t)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Version != version {
		t.Errorf("status version %q, want %q", st.Version, version)
	}
	for _, p := range st.Peers {
		if p.ID == b.id && p.Agent != "kith/"+version {
			t.Errorf("a sees b's user agent %q, want kith/%s", p.Agent, version)
		}
	}
	if r := a.kith("status"); !strings.Contains(r.stdout, "version") || !strings.Contains(r.stdout, version) {
		t.Errorf("kith status lacks the version line; %v", r)
	}

	// a logs JSON at debug level; its first record says which version.
	logs, err := os.ReadFile(a.log)
	if err != nil {
		t.Fatal(err)
	}
	var startSeen bool
	for _, l := range strings.Split(strings.TrimSpace(string(logs)), "\n") {
		var rec map[string]any
		if !strings.HasPrefix(l, "{") {
			continue // the harness's own header lines
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("--log-format json: a line is not JSON: %q", l)
		}
		startSeen = startSeen || rec["msg"] == "kith starting" && rec["version"] == version
		if rec["msg"] == "badger" {
			t.Errorf("badger's chatter logged at the node's debug level (store.db_log_level is warn): %q", l)
		}
	}
	if !startSeen {
		t.Errorf("--log-format json: want JSON records, and \"kith starting\" with the version:\n%s", logs)
	}
	if logs, _ := os.ReadFile(b.log); strings.Contains(string(logs), "level=INFO") {
		t.Errorf("b runs with --log-level warn over the config's info, yet logged at info:\n%s", logs)
	}

	// The flags are typed as the config's keys are: a misspelt value fails
	// at the flag, with the allowed values.
	r = a.kith("daemon", "--check", "--log-format", "yaml")
	if r.code == 0 || !strings.Contains(r.stderr, `"--log-format" flag: "yaml" is not a format; want "text" or "json"`) {
		t.Errorf("--log-format yaml: want a non-zero exit naming the flag and the formats; %v", r)
	}
	r = a.kith("daemon", "--check", "--log-level", "loud")
	if r.code == 0 || !strings.Contains(r.stderr, `"loud" is not a level; want "debug", "info", "warn" or "error"`) {
		t.Errorf("--log-level loud: want a non-zero exit naming the levels; %v", r)
	}
}

// TestE2EReload: kith reload and SIGHUP re-read the config: a new profile
// serves at once, a changed listen address is reported as needing a
// restart, and an invalid file changes nothing.
func TestE2EReload(t *testing.T) {
	dir := testDir(t)
	a := newNode(t, dir, "a", "")
	a.start()
	path := filepath.Join(a.home, "config.toml")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if r := a.kith("reload"); r.code != 0 || r.stdout != "config unchanged\n" {
		t.Errorf("reload of an unchanged file; %v", r)
	}

	extra := "\n[[profiles]]\nname = \"second\"\nexecutor = \"echo\"\n"
	changed := strings.Replace(string(orig), "/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/tcp/1", 1) + extra
	if changed == string(orig)+extra {
		t.Fatalf("setup: no tcp listen address to change in\n%s", orig)
	}
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	r := a.kith("reload")
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, "applied: profiles\n") || !strings.Contains(r.stdout, "need a restart: listen\n") {
		t.Errorf("reload: want profiles applied and listen needing a restart; %v", r)
	}
	r = a.kith("delegate", "--profile", "second", "live")
	if r.code != 0 || r.stdout != "live\n" {
		t.Errorf("the reloaded profile does not serve; %v", r)
	}

	if err := os.WriteFile(path, []byte(changed+"\nlog_level = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = a.kith("reload")
	if r.code == 0 || !strings.Contains(r.stderr, "log_level") {
		t.Errorf("reload of an invalid file: want a non-zero exit naming the key; %v", r)
	}

	// SIGHUP does what kith reload does: drop the profile again.
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(stateWait)
	for {
		var info api.NodeInfo
		r := a.kith("id", "--json")
		r.mustSucceed(t)
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(info.Profiles, "second") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP the profile \"second\" is still served: %v", info.Profiles)
		}
		time.Sleep(pollEvery)
	}
	if logs, _ := os.ReadFile(a.log); !strings.Contains(string(logs), "config reloaded") {
		t.Errorf("the daemon's log does not record the reloads:\n%s", logs)
	}
}
