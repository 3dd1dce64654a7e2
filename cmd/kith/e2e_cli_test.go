package main

// End-to-end tests of the CLI's inputs, outputs and messages (issue 16).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if d := a.delegation(delegationID(t, r)); d.State != "completed" {
		t.Errorf("2 MiB delegation: state %s, want completed", d.State)
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
