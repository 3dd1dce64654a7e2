package delegation

import "testing"

// A reason label is a typed word, never the text after it (which may
// quote a peer).
func TestReasonLabel(t *testing.T) {
	for in, want := range map[string]string{
		"":                                   "none",
		"busy: all 4 remote slots in use":    "busy",
		"not_allowed":                        "not_allowed",
		"timeout":                            "timeout",
		"executor_failed: exit status 1":     "executor_failed",
		"<img src=x onerror=alert(1)>: boom": "other",
		"a peer's free text":                 "other",
	} {
		if got := reasonLabel(in); got != want {
			t.Errorf("reasonLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
