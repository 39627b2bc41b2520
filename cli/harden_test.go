package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// berth run refuses a job whose one launch can never fit the node, naming
// the dimension, before it creates anything (the count = 100000
// made 51,934 directories and was still going after 20 s).
func TestRunRefusesWhatNeverFits(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "big.hcl")
	testenv.Must(t, os.WriteFile(job, []byte(`job "big" {
  type = "batch"
  group "g" {
    count = 100000
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/true" }
    }
  }
}
`), 0o644))
	out, _, err := run(t, "validate", job, "--client-memory-total-mb", "24105")
	if err != nil || !strings.Contains(out, `warning: `+job+`:3:3: job "big" cannot run on this node: memory exhausted`) {
		t.Errorf("validate: %v\n%s", err, out)
	}
	_, _, err = run(t, "run", job, "--data-dir", filepath.Join(dir, "data"), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir(),
		"--client-memory-total-mb", "24105")
	if err == nil || !strings.Contains(err.Error(), `memory exhausted: 100000 x 300 MB (group "g") = 30000000 MB > 24105 MB`) {
		t.Fatalf("run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("run created the data dir for a job it refused")
	}
}

// A token is never a command-line argument: --token is refused with what
// to use instead; --token-file and BERTH_TOKEN are read.
func TestNoTokenOnTheCommandLine(t *testing.T) {
	_, _, err := run(t, "job", "status", "x", "--address", "http://127.0.0.1:1", "--token", "0123456789abcdef")
	if !errors.Is(err, ErrTokenFlag) {
		t.Errorf("--token: %v", err)
	}
	f := filepath.Join(t.TempDir(), "token")
	testenv.Must(t, os.WriteFile(f, []byte(" from-file \n"), 0o600))
	cf := &ClientFlags{TokenFile: f}
	t.Setenv("BERTH_TOKEN", "from-env")
	if o, err := cf.options(); err != nil || o.Token != "from-file" {
		t.Errorf("--token-file: %+v %v", o, err)
	}
	cf.TokenFile = ""
	if o, err := cf.options(); err != nil || o.Token != "from-env" {
		t.Errorf("BERTH_TOKEN: %+v %v", o, err)
	}
}
