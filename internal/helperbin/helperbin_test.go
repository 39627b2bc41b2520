package helperbin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var errTestNotFound = errors.New("berth-fetchbin-test not found")

func TestFetchBinFind(t *testing.T) {
	const env = "BERTH_FETCHBIN_TEST"
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, explicit, envVal string
		want                   string // "" wants errTestNotFound
	}{
		{name: "explicit", explicit: exe, envVal: plain, want: exe},
		{name: "env", envVal: exe, want: exe},
		{name: "explicit not executable, env", explicit: plain, envVal: exe, want: exe},
		{name: "directory", envVal: dir},
		{name: "not executable", envVal: plain},
		{name: "nothing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(env, tc.envVal)
			t.Setenv("PATH", t.TempDir())
			got, err := Find(tc.explicit, "berth-fetchbin-test", env, errTestNotFound)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("Find = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, errTestNotFound) || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "go build ./cmd/berth-fetchbin-test") {
				t.Fatalf("Find = %q, %v; want %v naming %s and how to build it", got, err, errTestNotFound, env)
			}
		})
	}
}
