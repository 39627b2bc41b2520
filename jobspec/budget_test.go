package jobspec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// EvalBombs are job files that asked the process parsing them for
// gigabytes or hours before the budget (issue 18): each must be refused
// with a positioned error saying which limit it reached. The CLI's and
// the agent's tests send the same files.
var EvalBombs = []struct {
	Name string
	Src  string
	// Pos is line:col of the first error, Want a substring of it.
	Pos, Want string
}{
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
	{"unary not chain", "job \"x\" {\n  meta { x = " + strings.Repeat("!", 10000) + "true }\n}\n", "2:", "Nested too deeply"},
	{"unary minus chain", "job \"x\" {\n  meta { x = " + strings.Repeat("-", 10000) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"conditional chain", "job \"x\" {\n  meta { x = " + strings.Repeat("true ? 1 : ", 1000) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"operator chain", "job \"x\" {\n  meta { x = " + strings.Repeat("1 + ", 2500) + "1 }\n}\n", "2:", "Nested too deeply"},
	{"empty", "", "1:1", "the job file is empty"},
	{"whitespace only", " \n\t\n", "1:1", "the job file holds only white space"},
	{"invalid UTF-8", "job \"x\" {\n  meta { x = \"a\xff\" }\n}\n", "2:16", "invalid UTF-8"},
	{"RTL job name", "job \"evil\u202egnp.exe\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n", "1:5", "U+202E"},
}

// WithGroup adds a group that runs to the end of a job file (before its
// last "}"), so that the bomb's error is the file's first.
func WithGroup(src string) string {
	i := strings.LastIndex(src, "}")
	if i < 0 || !strings.HasPrefix(src, "job ") {
		return src
	}
	return src[:i] + "  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n" + src[i:]
}

// maxExtraHeap is the bound the issue sets (64 MiB), a correctness bound.
const maxExtraHeap = 64 << 20

func TestEvalBudgetBombs(t *testing.T) {
	for _, tt := range EvalBombs {
		t.Run(tt.Name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			opts := testOptions()
			opts.AllowFS = true // as berth validate and berth run
			_, err := Parse([]byte(WithGroup(tt.Src)), "bomb.hcl", opts)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			var diags Diagnostics
			if !errors.As(err, &diags) || len(diags) == 0 {
				t.Fatalf("got %v, want Diagnostics", err)
			}
			first := diags[0].String()
			if !strings.HasPrefix(first, "bomb.hcl:"+tt.Pos) || !strings.Contains(first, tt.Want) {
				t.Errorf("first error %q, want at bomb.hcl:%s and containing %q", first, tt.Pos, tt.Want)
			}
			// HeapSys only grows when the live heap outgrew what the
			// process had: the peak the parse needed, whatever the GC
			// freed meanwhile (TotalAlloc, logged, counts freed memory too).
			if extra := int64(after.HeapSys) - int64(before.HeapSys); extra > maxExtraHeap {
				t.Errorf("the heap grew by %d MiB, want < 64 MiB", extra>>20)
			}
			if took > 2*time.Second {
				t.Errorf("the parse took %s, want < 2s", took)
			}
			t.Logf("%s in %s, heap +%d MiB, allocated %d MiB", first, took.Round(time.Millisecond),
				(int64(after.HeapSys)-int64(before.HeapSys))>>20, (after.TotalAlloc-before.TotalAlloc)>>20)
		})
	}
}

// TestEvalBudgetCancel: a parse stops, with a positioned error, when its
// context ends (the agent passes the request's, which ends when the
// client leaves).
func TestEvalBudgetCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := WithGroup("job \"x\" {\n  meta { x = upper(\"a\") }\n}\n")
	_, err := ParseContext(ctx, []byte(src), "c.hcl", testOptions())
	if err == nil || !strings.HasPrefix(err.Error(), "c.hcl:2:14: evaluation limit reached; evaluation stopped: context canceled") {
		t.Fatalf("got %v", err)
	}
	_, err = ParseContext(context.Background(), []byte(src), "c.hcl", ParseOptions{EvalTimeout: time.Nanosecond})
	if err == nil || !strings.Contains(err.Error(), "c.hcl:2:14: evaluation limit reached; evaluating the job file took longer than 1ns") {
		t.Fatalf("got %v", err)
	}
}

// TestEvalBudgetFiles: the filesystem functions read beneath the job
// file's directory and the working directory only, not through a
// symlink out of them, and fileset's walk is bounded.
func TestEvalBudgetFiles(t *testing.T) {
	jobDir, cwd := t.TempDir(), t.TempDir()
	writeFile(t, jobDir, "ok.txt", "fine")
	if err := os.Symlink("/etc/passwd", filepath.Join(jobDir, "out.txt")); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(cwd, "big")
	for i := 0; i < 110; i++ {
		d := filepath.Join(big, strings.Repeat("d", 1+i%7)+string(rune('a'+i%26)), "x")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 100; j++ {
			writeFile(t, d, "f"+strings.Repeat("0", j%5)+string(rune('a'+j%26))+".txt", "")
		}
	}
	for _, tt := range []struct{ expr, want string }{
		{`file("ok.txt")`, ""},
		{`length(fileset(".", "*.txt"))`, ""},
		{`file("out.txt")`, "is outside both"},
		{`file("../../etc/passwd")`, "is outside both"},
		{`fileexists("/etc/passwd")`, "is outside both"},
		{`length(fileset("/etc", "*"))`, "is outside both"},
		{`length(fileset("big", "**"))`, "walked more than 10000 entries"},
	} {
		src := "job \"j\" {\n  meta { x = " + tt.expr + " }\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"/bin/true\" }\n    }\n  }\n}\n"
		path := writeFile(t, jobDir, "job.hcl", src)
		opts := testOptions()
		opts.AllowFS, opts.BaseDir = true, cwd
		_, err := ParseFile(path, opts)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.expr, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "job.hcl:2:") || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want a positioned %q", tt.expr, err, tt.want)
		}
	}
}
