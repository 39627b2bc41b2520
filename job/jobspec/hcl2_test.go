package jobspec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

const varsJob = `variable "image" {
  type = string
}

variable "ports" {
  type    = list(number)
  default = [80]
}

variable "count" {
  type    = number
  default = 1

  validation {
    condition     = var.count < 5
    error_message = "At most 4."
  }
}

job "j" {
  group "g" {
    count = var.count

    task "t" {
      driver = "podman"

      config {
        image = var.image
        ports = [for p in var.ports : "p${p}"]
      }
    }
  }
}
`

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVariables(t *testing.T) {
	dir := t.TempDir()
	hclFile := writeFile(t, dir, "v.hcl", "image = \"from-file\"\ncount = 2\n")
	jsonFile := writeFile(t, dir, "v.json", `{"image": "from-json", "ports": [1, 2]}`)
	undeclared := writeFile(t, dir, "bad.hcl", "image = \"x\"\nimgae = \"y\"\n")

	tests := []struct {
		name      string
		opts      ParseOptions
		image     string
		count     int
		ports     []any
		errPrefix string // "<file>:line:col: ..." of the first error
		errHas    string
	}{
		{name: "-var", opts: ParseOptions{Vars: []string{"image=a", "count=3"}}, image: "a", count: 3, ports: []any{"p80"}},
		{name: "later -var wins", opts: ParseOptions{Vars: []string{"image=a", "image=b"}}, image: "b", count: 1, ports: []any{"p80"}},
		{name: "-var of a list type is HCL", opts: ParseOptions{Vars: []string{"image=a", "ports=[8080, 9090]"}}, image: "a", count: 1, ports: []any{"p8080", "p9090"}},
		{name: "-var-file HCL", opts: ParseOptions{VarFiles: []string{hclFile}}, image: "from-file", count: 2, ports: []any{"p80"}},
		{name: "-var-file JSON", opts: ParseOptions{VarFiles: []string{jsonFile}}, image: "from-json", count: 1, ports: []any{"p1", "p2"}},
		{name: "NOMAD_VAR_", opts: ParseOptions{Env: []string{"NOMAD_VAR_image=env", "NOMAD_VAR_count=4", "NOMAD_VAR_unknown=1", "PATH=/bin"}}, image: "env", count: 4, ports: []any{"p80"}},
		{name: "file beats env, -var beats file", opts: ParseOptions{Env: []string{"NOMAD_VAR_image=env", "NOMAD_VAR_count=4"}, VarFiles: []string{hclFile}, Vars: []string{"image=arg"}},
			image: "arg", count: 2, ports: []any{"p80"}},
		{name: "required and unset", opts: ParseOptions{}, errPrefix: "job.hcl:1:1: ", errHas: `variable "image" is required and has no value; pass -var image=..., a -var-file that sets it, or NOMAD_VAR_image=...`},
		{name: "undeclared -var", opts: ParseOptions{Vars: []string{"image=a", "imag=b"}}, errPrefix: "job.hcl:1:1: ", errHas: `-var imag=b: the job file declares no variable "imag"; did you mean "image"?`},
		{name: "-var without =", opts: ParseOptions{Vars: []string{"image"}}, errPrefix: "job.hcl:1:1: ", errHas: `-var "image" is not NAME=VALUE`},
		{name: "wrong type", opts: ParseOptions{Vars: []string{"image=a", "count=many"}}, errPrefix: "job.hcl:10:1: ", errHas: `invalid value for variable "count" from -var count: a number is required`},
		{name: "validation", opts: ParseOptions{Vars: []string{"image=a", "count=7"}}, errPrefix: "job.hcl:10:1: ", errHas: `invalid value for variable "count" from -var count: At most 4.; checked by the validation rule at job.hcl:14:3`},
		{name: "undeclared in a var file", opts: ParseOptions{VarFiles: []string{undeclared}}, errPrefix: undeclared + ":2:1: ", errHas: `sets "imgae", which the job file does not declare; did you mean "image"?`},
		{name: "missing var file", opts: ParseOptions{VarFiles: []string{filepath.Join(dir, "nope.hcl")}}, errPrefix: "job.hcl:1:1: ", errHas: "cannot read -var-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Parse([]byte(varsJob), "job.hcl", tt.opts)
			if tt.errHas != "" {
				if err == nil {
					t.Fatalf("parsed; want %q", tt.errHas)
				}
				first := strings.SplitN(err.Error(), "\n", 2)[0]
				if !strings.HasPrefix(first, tt.errPrefix) || !strings.Contains(first, tt.errHas) {
					t.Fatalf("first error %q, want %q...%q", first, tt.errPrefix, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g := j.Groups[0]
			cfg := g.Tasks[0].Config
			if cfg["image"] != tt.image || g.Count != tt.count || !reflect.DeepEqual(cfg["ports"], tt.ports) {
				t.Errorf("image %v count %d ports %v, want %v %d %v", cfg["image"], g.Count, cfg["ports"], tt.image, tt.count, tt.ports)
			}
		})
	}
}

func TestLocals(t *testing.T) {
	src := `locals {
  b = "${local.a}-b"
}
locals {
  a = upper("a")
  c = { for k in ["x", "y"] : k => strlen(k) }
}
job "j" {
  meta {
    b = local.b
    c = local.c.y
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
    }
  }
}
`
	j, err := Parse([]byte(src), "l.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"b": "A-b", "c": "1"}; !reflect.DeepEqual(j.Meta, want) {
		t.Errorf("meta = %v, want %v", j.Meta, want)
	}
	cyclic := "locals {\n  a = local.b\n  b = local.a\n}\njob \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n"
	_, err = Parse([]byte(cyclic), "c.hcl", ParseOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), `c.hcl:2:3: local "a" depends on itself`) {
		t.Errorf("cycle: %v", err)
	}
}

// TestFunctions evaluates one call of each kind in a meta value; the
// expected values are what `nomad job run -output` printed for them.
func TestFunctions(t *testing.T) {
	tests := []struct{ expr, want string }{
		{`upper("a")`, "A"},
		{`reverse("abc")`, "cba"},
		{`strrev("abc")`, "cba"},
		{`coalesce("", "x")`, ""},
		{`convert(1, string)`, "1"},
		{`try(parseint("x", 10), 5)`, "5"},
		{`formatdate("YYYY", "2020-01-02T00:00:00Z")`, "2020"},
		{`cidrsubnet("10.0.0.0/8", 8, 2)`, "10.2.0.0/16"},
		{`cidrhost("10.199.130.0/24", 5)`, "10.199.130.5"},
		{`cidrnetmask("10.0.0.0/12")`, "255.240.0.0"},
		{`base64encode("hi")`, "aGk="},
		{`jsonencode({a=[1,2]})`, `{"a":[1,2]}`},
		{`yamlencode({a=1})`, "\"a\": 1\n"},
		{`lookup({a="b"}, "c", "d")`, "d"},
		{`md5("a")`, "0cc175b9c0f1b6a831c399e269772661"},
		{`element(["a","b"], 3)`, "b"},
		{`format("%05d", 3)`, "00003"},
		{`regex_replace("abc", "b", "X")`, "aXc"},
		{`title("hello world")`, "Hello World"},
		{`timeadd("2020-01-01T00:00:00Z", "1h")`, "2020-01-01T01:00:00Z"},
		{`substr("hello", 1, 3)`, "ell"},
		{`indent(2, "a\nb")`, "a\n  b"},
		{`join(",", sort(keys({b=1,a=2})))`, "a,b"},
		{`length(uuidv4())`, ""}, // not a collection: an error, as in Nomad
		{`strlen(uuidv4())`, "36"},
		{`uuidv5("dns", "berth.example")`, "c911676b-642a-5cd0-a3db-f0c2f93a88aa"},
		{`sha256("")`, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{`abs(-3)`, "3"},
		{`pow(2, 10)`, "1024"},
		{`chomp("x\n")`, "x"},
		{`urlencode("a b")`, "a+b"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			src := "job \"j\" {\n  meta {\n    v = " + tt.expr + "\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n"
			j, err := Parse([]byte(src), "f.hcl", ParseOptions{})
			if tt.want == "" && strings.HasPrefix(tt.expr, "length") {
				if err == nil || !strings.Contains(err.Error(), "f.hcl:3:") {
					t.Fatalf("want a positioned error, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := j.Meta["v"]; got != tt.want {
				t.Errorf("%s = %q, want %q", tt.expr, got, tt.want)
			}
		})
	}

	// Functions Terraform has and Nomad 1.6.5 does not are unknown.
	for _, fn := range []string{"timestamp()", "tostring(1)", "startswith(\"a\", \"a\")", "sum([1])"} {
		src := "job \"j\" {\n  meta {\n    v = " + fn + "\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n"
		if _, err := Parse([]byte(src), "f.hcl", ParseOptions{}); err == nil || !strings.Contains(err.Error(), "f.hcl:3:9: Call to unknown function") {
			t.Errorf("%s: %v", fn, err)
		}
	}
}

func TestFileFunctionPaths(t *testing.T) {
	cwd := t.TempDir()
	jobDir := t.TempDir()
	writeFile(t, cwd, "both.txt", "cwd")
	writeFile(t, jobDir, "both.txt", "job")
	writeFile(t, jobDir, "only-job.txt", "next to the job")
	src := `job "j" {
  meta {
    both     = file("both.txt")
    only_job = file("only-job.txt")
    exists   = fileexists("missing.txt")
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
    }
  }
}
`
	path := writeFile(t, jobDir, "job.hcl", src)
	j, err := ParseFile(path, ParseOptions{BaseDir: cwd, AllowFS: true})
	if err != nil {
		t.Fatal(err)
	}
	// Nomad resolves against the working directory; the job file's own
	// directory is the fallback.
	if want := map[string]string{"both": "cwd", "only_job": "next to the job", "exists": "false"}; !reflect.DeepEqual(j.Meta, want) {
		t.Errorf("meta = %v, want %v", j.Meta, want)
	}
	if _, err := ParseFile(path, ParseOptions{BaseDir: cwd}); err == nil || !strings.Contains(err.Error(), "filesystem functions are disabled") {
		t.Errorf("without AllowFS: %v", err)
	}
	bad := strings.Replace(src, `file("both.txt")`, `file("nowhere.txt")`, 1)
	if _, err := Parse([]byte(bad), path, ParseOptions{BaseDir: cwd, AllowFS: true}); err == nil || !strings.Contains(err.Error(), "job.hcl:3:16") || !strings.Contains(err.Error(), "no file exists") {
		t.Errorf("missing file: %v", err)
	}
}

func TestRuntimeReferences(t *testing.T) {
	j := mustParse(t, "testdata/corpus/runtime_refs.hcl", corpusOptions())
	want := map[string]string{
		"NODE":  "${node.unique.name}",
		"UPPER": "${ATTR.KERNEL.NAME}",
		"ALLOC": "${NOMAD_ALLOC_ID}-${NOMAD_ALLOC_INDEX}",
		"RACK":  "${meta.rack}",
		"HOME":  `${env["HOME"]}`,
		"LIT":   "${NOT_INTERPOLATED}",
	}
	if got := j.Groups[0].Tasks[0].Env; !reflect.DeepEqual(got, want) {
		t.Errorf("env =\n%v\nwant\n%v", got, want)
	}
	if c := j.Constraints[0]; c.Attribute != "${attr.kernel.name}" {
		t.Errorf("bare reference in a constraint = %q", c.Attribute)
	}
}

func TestLifecycle(t *testing.T) {
	j := mustParse(t, "testdata/corpus/lifecycle.hcl", corpusOptions())
	g := j.Groups[0]
	want := map[string]*Lifecycle{
		"migrate-db":  {Hook: HookPrestart},
		"log-shipper": {Hook: HookPrestart, Sidecar: true},
		"app":         nil,
		"announce":    {Hook: HookPoststart},
		"flush":       {Hook: HookPoststop},
	}
	for name, l := range want {
		task := g.Task(name)
		if !reflect.DeepEqual(task.Lifecycle, l) {
			t.Errorf("%s lifecycle = %+v, want %+v", name, task.Lifecycle, l)
		}
		if task.IsMain() != (l == nil) {
			t.Errorf("%s IsMain = %v", name, task.IsMain())
		}
	}
	if !g.Task("app").Leader || g.Task("flush").Leader {
		t.Error("leader not parsed")
	}

	// A lifecycle block without hook is dropped, as Nomad does.
	src := "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      lifecycle {\n        sidecar = true\n      }\n    }\n  }\n}\n"
	j, err := Parse([]byte(src), "l.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if task := j.Groups[0].Tasks[0]; task.Lifecycle != nil || !task.IsMain() || len(j.Warnings) != 1 || j.Warnings[0].Pos().String() != "l.hcl:5:7" {
		t.Errorf("lifecycle without hook: %+v, warnings %v", task.Lifecycle, j.Warnings)
	}
}

func TestTaskFields(t *testing.T) {
	j := mustParse(t, "testdata/corpus/task_behaviour.hcl", corpusOptions())
	task := j.Groups[0].Tasks[0]
	if task.KillSignal != "SIGTERM" || task.KillTimeout != 30*time.Second || task.ShutdownDelay != 10*time.Second || task.User != "nobody" {
		t.Errorf("task = %+v", task)
	}
	if want := (RestartPolicy{Attempts: 5, Interval: 30 * time.Minute, Delay: 5 * time.Second, Mode: RestartDelay}); task.Restart != want {
		t.Errorf("task restart = %+v, want %+v", task.Restart, want)
	}
	if task.Logs != (Logs{MaxFiles: 3, MaxFileSizeMB: 20}) || task.Resources.MemoryMaxMB != 1024 {
		t.Errorf("logs %+v resources %+v", task.Logs, task.Resources)
	}
	if n, ok := SignalNumber(task.KillSignal); !ok || n != 15 {
		t.Errorf("SignalNumber(SIGTERM) = %d %v", n, ok)
	}

	j = mustParse(t, "testdata/corpus/artifact.hcl", corpusOptions())
	arts := j.Groups[0].Tasks[0].Artifacts
	if len(arts) != 3 {
		t.Fatalf("artifacts = %+v", arts)
	}
	a := arts[0]
	if a.Destination != "local/tool" || a.Mode != "any" || a.ChecksumType != "sha256" || len(a.Checksum) != 64 || a.Headers["User-Agent"] != "berth" {
		t.Errorf("artifact 0 = %+v", a)
	}
	if arts[1].Mode != "file" || arts[2].Destination != "local/" || arts[2].Mode != "dir" {
		t.Errorf("artifacts 1, 2 = %+v %+v", arts[1], arts[2])
	}

	j = mustParse(t, "testdata/corpus/memory_unlimited.hcl", corpusOptions())
	if r := j.Groups[0].Tasks[0].Resources; r.MemoryMaxMB != MemoryUnlimited || r.MemoryMB != 256 {
		t.Errorf("resources = %+v", r)
	}
	j = mustParse(t, "testdata/corpus/max_run_duration.hcl", corpusOptions())
	if d := j.Groups[0].Tasks[0].MaxRunDuration; d != 15*time.Minute {
		t.Errorf("max_run_duration = %v", d)
	}
}

func TestSystemAndSysbatch(t *testing.T) {
	sys := mustParse(t, "testdata/corpus/system_job.hcl", corpusOptions())
	if sys.Type != TypeSystem || sys.RunsToCompletion() || sys.Groups[0].Count != 1 {
		t.Errorf("system job: type %s, count %d", sys.Type, sys.Groups[0].Count)
	}
	if want := defaultRestart(TypeService); sys.Groups[0].Restart != want {
		t.Errorf("system restart = %+v, want the service default %+v", sys.Groups[0].Restart, want)
	}
	sb := mustParse(t, "testdata/corpus/sysbatch_periodic.hcl", corpusOptions())
	g := sb.Groups[0]
	// count 2 is ignored: one allocation per node, and this is one node.
	if sb.Type != TypeSysbatch || !sb.RunsToCompletion() || g.Count != 1 || sb.Periodic == nil || sb.Periodic.TimeZone != "Europe/Berlin" {
		t.Errorf("sysbatch job: %+v", sb)
	}
	if g.Restart.Interval != 24*time.Hour || g.Restart.Attempts != 1 {
		t.Errorf("sysbatch restart = %+v, want the batch default interval", g.Restart)
	}
	batch := mustParse(t, "testdata/corpus/raw_exec_batch.hcl", corpusOptions())
	svc := mustParse(t, "testdata/corpus/podman_web.hcl", corpusOptions())
	if !batch.RunsToCompletion() || svc.RunsToCompletion() {
		t.Error("RunsToCompletion of batch/service")
	}
}

func TestTaskInJob(t *testing.T) {
	j := mustParse(t, "testdata/corpus/hcl1_task_in_job.hcl", corpusOptions())
	if len(j.Groups) != 1 || j.Groups[0].Name != "hello" || j.Groups[0].Count != 1 || j.Groups[0].Task("hello") == nil {
		t.Fatalf("groups = %+v", j.Groups)
	}
	src := "job \"j\" {\n  task \"g\" {\n    driver = \"raw_exec\"\n  }\n  group \"g\" {\n    task \"u\" {\n      driver = \"raw_exec\"\n    }\n  }\n}\n"
	if _, err := Parse([]byte(src), "d.hcl", ParseOptions{}); err == nil || !strings.HasPrefix(err.Error(), `d.hcl:5:9: duplicate group "g"`) {
		t.Errorf("task and group of one name: %v", err)
	}
}

func TestPlacement(t *testing.T) {
	node := corpusNode()
	// The seed job as written: valid, with a warning for its hostname
	// constraint; run refuses it on this node.
	seed := mustParse(t, "testdata/corpus/seed.hcl", corpusOptions())
	var warned bool
	for _, w := range seed.Warnings {
		if w.Pos().String() == "testdata/corpus/seed.hcl:9:3" && strings.Contains(w.Summary, `constraint "${attr.unique.hostname}" = "hostname"`) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning for the hostname constraint: %v", seed.Warnings)
	}
	err := seed.Placement(node)
	var pe *PlacementError
	if !errors.Is(err, ErrPlacement) || !errors.As(err, &pe) || errors.Is(err, ErrInvalidJob) {
		t.Fatalf("Placement = %v", err)
	}
	if pe.Pos.String() != "testdata/corpus/seed.hcl:9:3" || !strings.Contains(err.Error(), `this node has attr.unique.hostname = "berth-test"`) {
		t.Errorf("refusal = %v", err)
	}
	if u := seed.Unmet(node); len(u) != 2 || !strings.HasPrefix(u[1].What, "datacenters") {
		t.Errorf("Unmet = %v", u)
	}
	// On the node it names, it is placed.
	node["attr.unique.hostname"] = "hostname"
	if err := seed.Placement(node); err != nil {
		t.Errorf("Placement on the seed's node: %v", err)
	}

	// A datacenter this node is not in is reported, but not refused.
	dcs := mustParse(t, "testdata/corpus/datacenters_other.hcl", corpusOptions())
	if u := dcs.Unmet(corpusNode()); len(u) != 1 || u[0].Kind != PlaceDatacenters || !strings.Contains(u[0].What, `datacenters ["us-east-1a", "us-east-1b"]`) {
		t.Errorf("Unmet = %v", u)
	}
	if err := dcs.Placement(corpusNode()); err != nil {
		t.Errorf("Placement refused a datacenter: %v", err)
	}
	for _, tc := range []struct {
		file, what string
	}{
		{"constraint_windows.hcl", `constraint "${attr.kernel.name}" = "windows"`},
		{"node_pool_gpu.hcl", `node_pool "gpu"`},
	} {
		j := mustParse(t, "testdata/corpus/"+tc.file, corpusOptions())
		if err := j.Placement(corpusNode()); err == nil || !strings.Contains(err.Error(), tc.what) {
			t.Errorf("%s: Placement = %v, want %s", tc.file, err, tc.what)
		}
	}
	for _, file := range []string{"constraint_ops.hcl", "cluster_blocks_group.hcl", "system_job.hcl"} {
		if err := mustParse(t, "testdata/corpus/"+file, corpusOptions()).Placement(corpusNode()); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
	if !matchDatacenter([]string{"eu-*"}, "eu-west") || matchDatacenter([]string{"eu-*"}, "us-east") {
		t.Error("datacenter globs")
	}
}

func TestDispatch(t *testing.T) {
	parent := mustParse(t, "testdata/corpus/parameterized.hcl", corpusOptions())
	if !parent.IsParameterized() || parent.Parameterized.Payload != PayloadRequired {
		t.Fatalf("parameterized = %+v", parent.Parameterized)
	}
	payload := []byte(`{"file":"a.mp4"}`)
	tests := []struct {
		name    string
		meta    map[string]string
		payload []byte
		err     string
	}{
		{"ok", map[string]string{"input": "a.mp4"}, payload, ""},
		{"ok with optional", map[string]string{"input": "a.mp4", "priority": "high"}, payload, ""},
		{"missing required meta", map[string]string{"priority": "high"}, payload, "did not provide required meta keys: input"},
		{"unpermitted meta", map[string]string{"input": "a", "color": "red"}, payload, "included unpermitted meta keys: color (allowed: input, priority)"},
		{"payload required", map[string]string{"input": "a"}, nil, "requires a payload"},
		{"payload too big", map[string]string{"input": "a"}, bytes.Repeat([]byte("x"), MaxPayloadSize+1), "more than the maximum of 16384"},
	}
	now := time.Unix(1700000000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			child, err := parent.Dispatch(tt.meta, tt.payload, now, bytes.NewReader([]byte{0xde, 0xad, 0xbe, 0xef}))
			if tt.err != "" {
				if !errors.Is(err, ErrDispatch) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Dispatch = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if child.ID != "transcode/dispatch-1700000000-deadbeef" || child.Name != child.ID || child.ParentID != "transcode" || !child.Dispatched || child.IsParameterized() {
				t.Errorf("child = %s %s %s %v", child.ID, child.Name, child.ParentID, child.Dispatched)
			}
			wantMeta := map[string]string{"priority": "normal", "input": "a.mp4"}
			for k, v := range tt.meta {
				wantMeta[k] = v
			}
			if !reflect.DeepEqual(child.Meta, wantMeta) || !bytes.Equal(child.Payload, tt.payload) {
				t.Errorf("meta %v payload %q", child.Meta, child.Payload)
			}
			if p := child.Groups[0].Tasks[0].PayloadPath(); p != "local/job.json" {
				t.Errorf("PayloadPath = %q", p)
			}
			if parent.Meta["input"] != "" || parent.ID != "transcode" || parent.Dispatched {
				t.Errorf("the parent changed: %+v", parent)
			}
			// The child is a deep copy.
			child.Groups[0].Tasks[0].Config["command"] = "changed"
			if parent.Groups[0].Tasks[0].Config["command"] != "/bin/sh" {
				t.Error("child and parent share their config")
			}
			if _, err := child.Dispatch(nil, payload, now, nil); !errors.Is(err, ErrDispatch) {
				t.Errorf("dispatching a child: %v", err)
			}
		})
	}

	id, err := DispatchID("j", now, nil)
	if err != nil || !regexp.MustCompile(`^j/dispatch-1700000000-[0-9a-f]{8}$`).MatchString(id) {
		t.Errorf("DispatchID = %q %v", id, err)
	}
	plain := mustParse(t, "testdata/corpus/raw_exec_batch.hcl", corpusOptions())
	if _, err := plain.Dispatch(nil, nil, now, nil); !errors.Is(err, ErrDispatch) || !strings.Contains(err.Error(), "not a parameterized job") {
		t.Errorf("dispatching a plain job: %v", err)
	}
	forbidden := mustParse(t, "testdata/corpus/parameterized_sysbatch.hcl", corpusOptions())
	if err := forbidden.CheckDispatch(map[string]string{"level": "1"}, []byte("x")); err == nil || !strings.Contains(err.Error(), "forbids a payload") {
		t.Errorf("forbidden payload: %v", err)
	}
	if err := forbidden.CheckDispatch(map[string]string{"level": "1"}, nil); err != nil {
		t.Errorf("no payload, optional meta: %v", err)
	}
	// The config keeps its integer types in the copy.
	cfgJob, err := Parse([]byte("job \"j\" {\n  type = \"batch\"\n  parameterized {}\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        n = 3\n      }\n    }\n  }\n}\n"), "c.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child, err := cfgJob.Dispatch(nil, nil, now, nil)
	if err != nil || child.Groups[0].Tasks[0].Config["n"] != int64(3) {
		t.Errorf("child config = %#v %v", child.Groups[0].Tasks[0].Config, err)
	}
}

func TestServicesAndTemplates(t *testing.T) {
	j := mustParse(t, "testdata/corpus/services_templates.hcl", corpusOptions())
	g := j.Groups[0]
	if len(g.Services) != 1 || len(g.Services[0].Checks) != 2 {
		t.Fatalf("services = %+v", g.Services)
	}
	s := g.Services[0]
	c := s.Checks[0]
	if s.Provider != "nomad" || s.AddressMode != "host" || s.Meta["version"] != "1" || c.Type != "tcp" || c.Interval != 10*time.Second || c.CheckRestart.Limit != 3 {
		t.Errorf("service %+v check %+v", s, c)
	}
	if h := s.Checks[1].Header["Authorization"]; !reflect.DeepEqual(h, []string{"Bearer x"}) {
		t.Errorf("header = %v", h)
	}
	task := g.Tasks[0]
	if len(task.Templates) != 3 || len(task.Services) != 1 || len(g.AllServices()) != 2 {
		t.Fatalf("templates %d, task services %d", len(task.Templates), len(task.Services))
	}
	t0, t1, t2 := task.Templates[0], task.Templates[1], task.Templates[2]
	if t0.ChangeMode != "signal" || t0.ChangeSignal != "SIGHUP" || t0.Perms != "0640" || t0.Splay != 10*time.Second {
		t.Errorf("template 0 = %+v", t0)
	}
	if !t1.Env || t1.WaitMin != 2*time.Second || t1.WaitMax != 10*time.Second || t1.LeftDelimiter != "{{" {
		t.Errorf("template 1 = %+v", t1)
	}
	if t2.ChangeScript == nil || t2.ChangeScript.Command != "/bin/reload" || !t2.ChangeScript.FailOnError {
		t.Errorf("template 2 = %+v", t2)
	}
}

func TestNewFieldsJSON(t *testing.T) {
	j := mustParse(t, "testdata/corpus/task_behaviour.hcl", corpusOptions())
	c, err := j.Copy()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := j.Groups[0].Tasks[0], c.Groups[0].Tasks[0]; a.ShutdownDelay != b.ShutdownDelay || a.KillTimeout != b.KillTimeout || !reflect.DeepEqual(a.Logs, b.Logs) {
		t.Errorf("copy lost task fields: %+v", b)
	}
}
