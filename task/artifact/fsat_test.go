package artifact

import (
	"strings"
	"testing"
)

// No archive entry or link lands outside the destination.
func TestArtifactSecEntryPaths(t *testing.T) {
	for _, tc := range []struct {
		entry, want, err string
	}{
		{entry: "a/b.txt", want: "a/b.txt"},
		{entry: "./a/../c.txt", want: "c.txt"},
		{entry: "../x", err: "leads out of the destination"},
		{entry: "/etc/passwd", err: "leads out of the destination"},
		{entry: "a\x00b", err: "no usable name"},
	} {
		got, err := entryRel(tc.entry)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) || (err == nil && got != tc.want) {
			t.Errorf("entry %q: %q %v, want %q %q", tc.entry, got, err, tc.want, tc.err)
		}
	}
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"lib.so.1", true}, {"../l2", true}, {"../../etc", false}, {"/etc", false},
	} {
		err := checkLink("sub/l", tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("link to %s: %v", tc.target, err)
		}
	}
}
