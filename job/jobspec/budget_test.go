package jobspec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/job/jobspec/jobspectest"
)

// maxExtraHeap is the bound the issue sets (64 MiB), a correctness bound.
const maxExtraHeap = 64 << 20

func TestEvalBudgetBombs(t *testing.T) {
	// One baseline before the first bomb: each bomb is measured from it,
	// so what an earlier one kept counts too (HeapSys does not shrink).
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, tt := range jobspectest.EvalBombs {
		t.Run(tt.Name, func(t *testing.T) {
			var pre, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&pre) // for TotalAlloc, logged only
			start := time.Now()
			opts := testOptions()
			opts.AllowFS = true // as berth validate and berth run
			_, err := Parse([]byte(jobspectest.WithGroup(tt.Src)), "bomb.hcl", opts)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			var diags Diagnostics
			if !errors.As(err, &diags) || len(diags) == 0 {
				t.Fatalf("got %v, want Diagnostics", err)
			}
			first := diags[0].String()
			if !strings.HasPrefix(first, "bomb.hcl:") || !tt.Matches("bomb.hcl", first) {
				t.Errorf("first error %q, want at bomb.hcl:%s and containing %q", first, tt.Pos, tt.Want)
			}
			// HeapSys only grows when the live heap outgrew what the
			// process had: the peak the parse needed, whatever the GC
			// freed meanwhile (TotalAlloc, logged, counts freed memory too).
			if extra := int64(after.HeapSys) - int64(before.HeapSys); extra > maxExtraHeap {
				t.Errorf("the heap is %d MiB above its size before the bombs, want < 64 MiB", extra>>20)
			}
			if took > 2*time.Second {
				t.Errorf("the parse took %s, want < 2s", took)
			}
			t.Logf("%s in %s, heap +%d MiB over the baseline, allocated %d MiB", first, took.Round(time.Millisecond),
				(int64(after.HeapSys)-int64(before.HeapSys))>>20, (after.TotalAlloc-pre.TotalAlloc)>>20)
		})
	}
}

// TestEvalBudgetCancel: a parse stops, with a positioned error, when its
// context ends (the agent passes the request's, which ends when the
// client leaves).
func TestEvalBudgetCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src := jobspectest.WithGroup("job \"x\" {\n  meta { x = upper(\"a\") }\n}\n")
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

// TestEvalBudgetVars: values given outside the job file (-var, a
// -var-file) are evaluated within the budget too, and a JSON var file's
// strings stay literal.
func TestEvalBudgetVars(t *testing.T) {
	nums := make([]string, 1000)
	for i := range nums {
		nums[i] = strconv.Itoa(i)
	}
	l := "[" + strings.Join(nums, ",") + "]"
	bomb := "[for a in " + l + " : [for b in " + l + " : [for c in " + l + " : 1]]]"
	src := jobspectest.WithGroup("variable \"l\" {\n  type = list(any)\n}\nvariable \"s\" {\n  type = string\n  default = \"\"\n}\njob \"x\" {\n  meta { s = var.s }\n}\n")
	for _, tt := range []struct {
		name string
		opts ParseOptions
		want string
	}{
		{"-var", ParseOptions{Vars: []string{"l=" + bomb}}, "evaluation limit reached"},
		{"hcl var file", ParseOptions{VarFileSources: []VarFile{{Name: "v.hcl", Src: []byte("l = " + bomb + "\n")}}}, "evaluation limit reached"},
		{"-var nested too deeply", ParseOptions{Vars: []string{"l=" + strings.Repeat("[", 10000)}}, "Nested too deeply"},
		{"-var with too many items", ParseOptions{Vars: []string{"l=[" + strings.Repeat("1,", 10000) + "1]"}}, "Too many items"},
		{"json var file with too many items", ParseOptions{VarFileSources: []VarFile{{Name: "v.json", Src: []byte(`{"l": [` + strings.Repeat("1,", 100000) + `1]}`)}}}, "v.json:1:"},
		{"json var file keeps ${}", ParseOptions{VarFileSources: []VarFile{{Name: "v.json", Src: []byte(`{"l": [1], "s": "${x}"}`)}}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions()
			opts.Vars, opts.VarFileSources = tt.opts.Vars, tt.opts.VarFileSources
			start := time.Now()
			j, err := Parse([]byte(src), "vars.hcl", opts)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %s", took)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want == "" && j.Meta["s"] != "${x}":
				t.Errorf("meta s = %q, want the literal ${x}", j.Meta["s"])
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}
