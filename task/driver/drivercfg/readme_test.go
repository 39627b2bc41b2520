package drivercfg_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/berth/berth/task/driver/docker"
	"github.com/berth/berth/task/driver/drivercfg"
	"github.com/berth/berth/task/driver/exec"
	"github.com/berth/berth/task/driver/podman"
)

var update = flag.Bool("update", false, "write the drivers' key tables into README.md")

const readme = "../../../README.md"

// TestREADME checks the README's tables of driver config keys against the
// drivers' tables: same keys, same verdicts, same reasons.
func TestREADME(t *testing.T) {
	tables := []struct {
		marker string
		rows   []drivercfg.Row
	}{
		{"exec", exec.ConfigKeys()},
		{"podman", podman.ConfigKeys()},
		{"docker", docker.ConfigKeys()},
	}
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, tt := range tables {
		begin, end := "<!-- driver-keys "+tt.marker+" begin -->\n", "<!-- driver-keys "+tt.marker+" end -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			t.Fatalf("README.md has no %q ... %q markers", begin, end)
		}
		i += len(begin)
		want := drivercfg.Markdown(tt.rows)
		if got := text[i:j]; got != want {
			if !*update {
				t.Errorf("README.md's %s key table differs from the driver's: run go test ./task/driver/drivercfg -run TestREADME -update\ngot:\n%s\nwant:\n%s", tt.marker, got, want)
				continue
			}
			text = text[:i] + want + text[j:]
		}
	}
	if *update && text != string(b) {
		if err := os.WriteFile(readme, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
