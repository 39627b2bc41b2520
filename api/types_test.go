package api

import "testing"

// How an exit reads: nothing while the task runs, why it never ran, that
// it cannot be known, or the code (and signal).
func TestExitText(t *testing.T) {
	for _, tc := range []struct {
		state      string
		notStarted bool
		code, sig  int
		want       string
	}{
		{"running", false, 0, 0, ""},
		{"pending", false, 0, 0, ""},
		{"dead", true, -1, 0, "not started"},
		{"dead", false, -1, 0, "unknown"},
		{"dead", false, 0, 0, "0"},
		{"dead", false, 137, 9, "137 (signal 9)"},
	} {
		if got := ExitText(tc.state, tc.notStarted, tc.code, tc.sig); got != tc.want {
			t.Errorf("ExitText(%q, %v, %d, %d) = %q, want %q", tc.state, tc.notStarted, tc.code, tc.sig, got, tc.want)
		}
	}
}
