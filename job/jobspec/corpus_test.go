package jobspec

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	execdrv "github.com/berth/berth/task/driver/exec"
	"github.com/berth/berth/task/driver/podman"
)

// corpusNode is the node the corpus is checked against: a Debian amd64
// machine in dc1 whose hostname is not the seed's "hostname".
func corpusNode() NodeAttrs {
	return NodeAttrs{
		"attr.unique.hostname": "berth-test",
		"attr.kernel.name":     "linux",
		"attr.kernel.version":  "6.1.0-28-amd64",
		"attr.kernel.arch":     "x86_64",
		"attr.cpu.arch":        "amd64",
		"attr.cpu.numcores":    "2",
		"attr.os.name":         "debian",
		"attr.os.version":      "12",
		"node.unique.name":     "berth-test",
		"node.datacenter":      "dc1",
		"node.region":          "global",
	}
}

// corpusOptions are validate's (NodeWarnings): the corpus is compared
// with Nomad's validate, which knows no node. Its node has the CNI
// network "private" and the users of /etc/passwd.
func corpusOptions() ParseOptions {
	rawExec, exec := execdrv.NewRawExec(execdrv.Options{}), execdrv.NewExec(execdrv.Options{})
	return ParseOptions{
		Node:    corpusNode(),
		AllowFS: true,
		Drivers: map[string]func(map[string]any) error{
			"raw_exec": rawExec.ValidateConfig,
			"exec":     exec.ValidateConfig,
			"podman":   podman.Policy{}.ValidateConfig,
		},
		Users: map[string]func(string) error{"raw_exec": rawExec.ValidateUser, "exec": exec.ValidateUser},
		Network: func(name string) error {
			if name != "private" {
				return fmt.Errorf("no CNI network named %q (networks there: private)", name)
			}
			return nil
		},
		NodeWarnings: true,
	}
}

// corpusCase is one line of testdata/corpus/expected.tsv.
type corpusCase struct {
	file  string
	nomad string // Nomad 1.6.5's `nomad job validate`: accept or refuse
	berth string // accept or refuse
	pos   string // line:col of berth's first error, "-" when accepted
	has   string // substring of berth's first error, or of a warning when accepted ("-": none)
	note  string // why nomad and berth differ, required when they do
}

func readCorpus(t *testing.T) []corpusCase {
	t.Helper()
	f, err := os.Open("testdata/corpus/expected.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusCase
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		if len(cols) < 5 {
			t.Fatalf("expected.tsv:%d: want file, nomad, berth, pos, substring[, note], got %q", line, text)
		}
		c := corpusCase{file: cols[0], nomad: cols[1], berth: cols[2], pos: cols[3], has: cols[4]}
		if len(cols) > 5 {
			c.note = cols[5]
		}
		out = append(out, c)
	}
	return out
}

// TestCorpus checks every job file of the corpus against the result
// recorded for berth, and that every difference from Nomad 1.6.5 (also
// recorded, from compare-nomad.sh) is explained.
func TestCorpus(t *testing.T) {
	cases := readCorpus(t)
	listed := map[string]bool{}
	for _, c := range cases {
		listed[c.file] = true
		t.Run(strings.TrimSuffix(c.file, ".hcl"), func(t *testing.T) {
			if c.nomad != c.berth && c.note == "" {
				t.Errorf("berth %ss and Nomad %ss without a note saying why", c.berth, c.nomad)
			}
			path := filepath.Join("testdata", "corpus", c.file)
			opts := corpusOptions()
			base := strings.TrimSuffix(path, ".hcl")
			for _, vf := range []string{base + ".vars.hcl", base + ".vars.json"} {
				if _, err := os.Stat(vf); err == nil {
					opts.VarFiles = append(opts.VarFiles, vf)
				}
			}
			job, err := ParseFile(path, opts)
			switch c.berth {
			case "accept":
				if err != nil {
					t.Fatalf("refused:\n%v", err)
				}
				var ws []string
				for _, w := range job.Warnings {
					ws = append(ws, w.String())
				}
				all := strings.Join(ws, "\n")
				if c.has != "-" && !strings.Contains(all, c.has) {
					t.Errorf("no warning contains %q; warnings:\n%s", c.has, all)
				}
			case "refuse":
				if err == nil {
					t.Fatalf("accepted; want a refusal at %s containing %q", c.pos, c.has)
				}
				if !errors.Is(err, ErrInvalidJob) {
					t.Errorf("error does not match ErrInvalidJob: %v", err)
				}
				first := strings.SplitN(err.Error(), "\n", 2)[0]
				if !strings.HasPrefix(first, path+":"+c.pos+": ") || !strings.Contains(first, c.has) {
					t.Errorf("first error %q, want %s:%s: ...%s...", first, path, c.pos, c.has)
				}
			default:
				t.Fatalf("berth column is %q, want accept or refuse", c.berth)
			}
		})
	}
	// expected.tsv's nomad column is what compare-nomad.sh recorded.
	rec, err := os.ReadFile("testdata/corpus/nomad-1.6.5.tsv")
	if err != nil {
		t.Fatal(err)
	}
	nomad := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(rec)), "\n") {
		cols := strings.SplitN(line, "\t", 3)
		nomad[cols[0]] = cols[1]
	}
	for _, c := range cases {
		if nomad[c.file] != c.nomad {
			t.Errorf("%s: expected.tsv says Nomad would %s, nomad-1.6.5.tsv recorded %q", c.file, c.nomad, nomad[c.file])
		}
	}
	files, err := filepath.Glob("testdata/corpus/*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, ".vars.hcl") {
			continue
		}
		n++
		if !listed[name] {
			t.Errorf("%s is not in expected.tsv", name)
		}
	}
	if n < 40 {
		t.Errorf("the corpus has %d job files, want at least 40", n)
	}
}
