// Package jobspectest holds job files that the tests of several packages
// send: the evaluation bombs of issue 18, which the parser (jobspec), the
// CLI (berth validate) and the agent's API must all refuse, fast, small
// and positioned.
package jobspectest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Bomb is one job file and the refusal it must get.
type Bomb struct {
	Name string
	Src  string
	// Pos is line:col of the first error, Want a substring of it.
	Pos, Want string
}

// Matches reports whether the error text (of a file named file) is the
// refusal b wants: Want at Pos, or the evaluation deadline's, positioned
// anywhere, on a machine so slow that it came first.
func (b Bomb) Matches(file, text string) bool {
	if strings.Contains(text, file+":"+b.Pos) && strings.Contains(text, b.Want) {
		return true
	}
	return strings.Contains(text, file+":") && strings.Contains(text, "evaluation limit reached; evaluating the job file took longer than")
}

// EvalBombs are job files that asked the process parsing them for
// gigabytes or hours before the budget (issue 18): each must be refused
// with a positioned error saying which limit it reached. The CLI's and
// the agent's tests send the same files (with WithGroup).
var EvalBombs = []Bomb{
	{"setproduct", `job "x" {
  meta {
    x = length(setproduct(range(1000), range(1000), range(1000)))
  }
}
`, "3:16", "more than 100000 collection elements"},
	{"range", `job "x" {
  meta { x = length(range(0, 1, 1e-300)) }
}
`, "2:21", "more than 100000 collection elements"},
	{"yamldecode alias bomb", `job "x" {
  meta {
    x = length(yamldecode(<<EOT
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
EOT
    ))
  }
}
`, "3:16", "the YAML text expands to more than"},
	{"yamldecode deep", `job "x" {
  meta { x = yamldecode("` + strings.Repeat("[", 5000) + `") }
}
`, "2:14", "nests more than 256 levels"},
	{"jsondecode deep", `job "x" {
  meta { x = jsondecode("` + strings.Repeat("[", 5000) + `") }
}
`, "2:14", "nests more than 256 levels"},
	{"fileset root", `job "x" {
  meta { x = length(fileset("/", "**")) }
}
`, "2:21", "is outside both"},
	{"file dev zero", `job "x" {
  meta { x = file("/dev/zero") }
}
`, "2:14", "is outside both"},
	{"format padding", `job "x" {
  meta { x = format("%0999999999d", 1) }
}
`, "2:14", "bytes of strings"},
	{"formatlist", `job "x" {
  meta { x = length(formatlist("%0999999d", range(100))) }
}
`, "2:21", "bytes of strings"},
	{"indent", `locals { s = join("\n", range(1000)) }
job "x" {
  meta { x = indent(100000, local.s) }
}
`, "3:14", "bytes of strings"},
	{"replace empty", `locals { s = join("", [for i in range(1000) : "aaaaaaaa"]) }
job "x" {
  meta { x = replace(local.s, "", local.s) }
}
`, "3:14", "bytes of strings"},
	{"flatten", `locals { l = [for i in range(150) : range(150)] }
job "x" {
  meta { x = length(flatten([local.l, local.l, local.l])) }
}
`, "3:21", "collection elements"},
	{"nested for", `locals { l = range(1000) }
job "x" {
  meta { x = length([for a in local.l : [for b in local.l : [for c in local.l : 1]]]) }
}
`, "3:", "collection elements"},
	{"template doubling", `locals {
    s0 = "` + strings.Repeat("x", 1000) + `"
    s1 = "${local.s0}${local.s0}${local.s0}${local.s0}${local.s0}${local.s0}${local.s0}${local.s0}"
    s2 = "${local.s1}${local.s1}${local.s1}${local.s1}${local.s1}${local.s1}${local.s1}${local.s1}"
    s3 = "${local.s2}${local.s2}${local.s2}${local.s2}${local.s2}${local.s2}${local.s2}${local.s2}"
    s4 = "${local.s3}${local.s3}${local.s3}${local.s3}${local.s3}${local.s3}${local.s3}${local.s3}"
    s5 = "${local.s4}${local.s4}${local.s4}${local.s4}${local.s4}${local.s4}${local.s4}${local.s4}"
}
job "x" {
  meta { x = local.s5 }
}
`, "7:", "bytes of strings"},
	{"tuple doubling", `locals {
    l0 = range(100)
    l1 = [local.l0, local.l0, local.l0, local.l0, local.l0, local.l0, local.l0, local.l0]
    l2 = [local.l1, local.l1, local.l1, local.l1, local.l1, local.l1, local.l1, local.l1]
    l3 = [local.l2, local.l2, local.l2, local.l2, local.l2, local.l2, local.l2, local.l2]
    l4 = [local.l3, local.l3, local.l3, local.l3, local.l3, local.l3, local.l3, local.l3]
}
job "x" {
  meta { x = jsonencode(local.l4) }
}
`, "6:10", "collection elements"},
	{"try hides the limit", `job "x" {
  meta { x = try(length(setproduct(range(1000), range(1000), range(1000))), 0) }
}
`, "2:14", "more than 100000 collection elements"},
	{"bcrypt cost", `job "x" {
  meta { x = bcrypt("a", 31) }
}
`, "2:26", "bcrypt cost 31 is above 12"},
	{"distinct", `job "x" {
  meta { x = length(distinct(flatten([for i in range(20) : [for j in range(100) : i * 100 + j]]))) }
}
`, "2:30", "distinct of 2000 elements; at most 500"},
	{"long collection", `job "x" {
  meta { x = length(sort(flatten([for i in range(120) : [for j in range(120) : "${i * 120 + j}"]]))) }
}
`, "2:26", "a collection of 14400 elements; one collection holds at most 4096"},
	{"long literal", "job \"x\" {\n  meta { x = length(sort([" + strings.Repeat("\"a\",", 5000) + "])) }\n}\n", "2:", "Too many items"},
	{"unary not chain", "job \"x\" {\n  meta { x = " + strings.Repeat("!", 10000) + "true }\n}\n", "2:", "Nested too deeply"},
	{"unary minus chain", "job \"x\" {\n  meta { x = " + strings.Repeat("-", 10000) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"conditional chain", "job \"x\" {\n  meta { x = " + strings.Repeat("true ? 1 : ", 1000) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"operator chain", "job \"x\" {\n  meta { x = " + strings.Repeat("1 + ", 2500) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"empty", "", "1:1", "the job file is empty"},
	{"whitespace only", " \n\t\n", "1:1", "the job file holds only white space"},
	{"invalid UTF-8", "job \"x\" {\n  meta { x = \"a\xff\" }\n}\n", "2:16", "invalid UTF-8"},
	{"RTL job name", "job \"evil\u202egnp.exe\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n", "1:5", "U+202E"},
}

// WithGroup adds a group that runs to a job file without one (before its
// last "}"), so that the bomb's error is the file's only one.
func WithGroup(src string) string {
	i := strings.LastIndex(src, "}")
	if i < 0 || !strings.Contains(src, "job \"") || strings.Contains(src, "group \"") {
		return src
	}
	return src[:i] + "  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n" + src[i:]
}

// The checked-in seed corpus: one file per bomb in each fuzzer's
// testdata/fuzz/<Fuzz> directory, which `go test` runs as seeds and CI's
// fuzzing (scripts/test.sh) starts from.

// UpdateCorpusEnv set to 1 makes CheckCorpus write the corpus files
// instead of checking them (after a bomb was added or changed).
const UpdateCorpusEnv = "BERTH_UPDATE_FUZZ_CORPUS"

// CorpusName is the name of bomb b's file in a fuzzer's corpus.
func CorpusName(b Bomb) string {
	return "budget-" + strings.ReplaceAll(strings.ToLower(b.Name), " ", "-")
}

// CorpusEntry is a corpus file holding data, as `go test` writes and
// reads them (a fuzzer of one []byte argument).
func CorpusEntry(data []byte) []byte {
	return []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
}

// CheckCorpus checks that dir (testdata/fuzz/<Fuzz>) holds, for every
// bomb, its file with input(b): the fuzzer's checked-in corpus is the
// bombs the budget tests send, none missing or stale. With
// UpdateCorpusEnv=1 it writes them.
func CheckCorpus(t testing.TB, dir string, input func(Bomb) []byte) {
	t.Helper()
	update := os.Getenv(UpdateCorpusEnv) == "1"
	for _, b := range EvalBombs {
		path := filepath.Join(dir, CorpusName(b))
		want := CorpusEntry(input(b))
		if update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("bomb %q has no corpus file: %v (run with %s=1 to write it)", b.Name, err, UpdateCorpusEnv)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("corpus file %s is not bomb %q as the budget tests send it (run with %s=1 to rewrite it)", path, b.Name, UpdateCorpusEnv)
		}
	}
}
