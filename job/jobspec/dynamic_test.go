package jobspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// groupJob is a job whose group "g" holds body and a task "t" holding
// task; body starts on line 3, task on line 9.
func groupJob(body, task string) string {
	return fmt.Sprintf(`job "j" {
  group "g" {
%s
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
%s
    }
  }
}
`, body, task)
}

// Dynamic blocks generate blocks as if written out; what is wrong in them
// is an error at its position in the file.
func TestDynamicBlocks(t *testing.T) {
	tests := []struct {
		name string
		src  string
		// err is a substring of the first error, "" for a valid job; pos
		// its line:col.
		err, pos string
		check    func(t *testing.T, j *Job)
	}{
		{
			name: "ports from a map, in key order",
			src:  groupJob("network {\n dynamic \"port\" {\n for_each = { b = 2, a = 1 }\n labels = [port.key]\n content { static = 8000 + port.value }\n }\n}", ""),
			check: func(t *testing.T, j *Job) {
				ps := j.Groups[0].Network.Ports
				if len(ps) != 2 || ps[0].Label != "a" || ps[0].Static != 8001 || ps[1].Label != "b" || ps[1].Static != 8002 {
					t.Errorf("ports %+v, want a=8001, b=8002", ps)
				}
			},
		},
		{
			name: "iterator and nested dynamic reading both iterators",
			src: groupJob("", `dynamic "template" {
 for_each = ["x", "y"]
 iterator = f
 content {
  data = "${f.key}:${f.value}"
  destination = "local/${f.value}"
  dynamic "wait" {
   for_each = [f.key]
   content { min = "${wait.value + 1}s" }
  }
 }
}`),
			check: func(t *testing.T, j *Job) {
				ts := j.Groups[0].Tasks[0].Templates
				if len(ts) != 2 || ts[0].Data != "0:x" || ts[1].Destination != "local/y" {
					t.Fatalf("templates %+v", ts)
				}
				if ts[1].WaitMin.String() != "2s" {
					t.Errorf("second template's wait min %s, want 2s", ts[1].WaitMin)
				}
			},
		},
		{
			name: "runtime references stay literal in generated blocks",
			src:  groupJob("", "dynamic \"env\" {\n for_each = [1]\n content { HOST = attr.unique.hostname }\n}"),
			check: func(t *testing.T, j *Job) {
				if got := j.Groups[0].Tasks[0].Env["HOST"]; got != "${attr.unique.hostname}" {
					t.Errorf("HOST = %q", got)
				}
			},
		},
		{
			name: "in a driver's config",
			src:  "job \"j\" {\n group \"g\" {\n task \"t\" {\n driver = \"podman\"\n config {\n image = \"alpine\"\n dynamic \"logging\" {\n for_each = [\"journald\"]\n content { driver = logging.value }\n }\n }\n }\n }\n}\n",
			check: func(t *testing.T, j *Job) {
				got := fmt.Sprint(j.Groups[0].Tasks[0].Config["logging"])
				if got != "[map[driver:journald]]" {
					t.Errorf("config logging = %s, want [map[driver:journald]]", got)
				}
			},
		},
		{
			name:  "empty for_each generates nothing",
			src:   groupJob("dynamic \"constraint\" {\n for_each = []\n content {\n attribute = \"x\"\n }\n}", ""),
			check: func(t *testing.T, j *Job) {},
		},
		{name: "no label", src: groupJob("dynamic {\n for_each = [1]\n content {}\n}", ""), err: "dynamic block in a dynamic block is missing its block type label", pos: "3:1"},
		{name: "no for_each", src: groupJob("dynamic \"constraint\" {\n content {}\n}", ""), err: `dynamic "constraint" has no for_each`, pos: "3:1"},
		{name: "no content", src: groupJob("dynamic \"constraint\" {\n for_each = [1]\n}", ""), err: `dynamic "constraint" has no content block`, pos: "3:1"},
		{name: "unknown attribute", src: groupJob("dynamic \"constraint\" {\n for_each = [1]\n count = 2\n content {}\n}", ""), err: `unknown attribute "count" in dynamic "constraint"`, pos: "5:2"},
		{name: "iterator not a name", src: groupJob("dynamic \"constraint\" {\n for_each = [1]\n iterator = \"c\"\n content {}\n}", ""), err: `iterator of dynamic "constraint" must be a name`, pos: "5:13"},
		{name: "for_each a string", src: groupJob("dynamic \"constraint\" {\n for_each = \"abc\"\n content {}\n}", ""), err: `must be a list, set, map or object, got string "abc"`, pos: "4:13"},
		{name: "labels not a list", src: groupJob("", "dynamic \"artifact\" {\n for_each = [1]\n labels = { a = 1 }\n content {}\n}"), err: `labels of dynamic "artifact" must be a list of strings`, pos: "11:11"},
		{name: "label where none is taken", src: groupJob("", "dynamic \"artifact\" {\n for_each = [1]\n labels = [\"x\"]\n content { source = \"https://e.com/a\" }\n}"), err: `artifact block in task "t" in group "g" takes no label, got "x"`, pos: "11:11"},
		{name: "unknown block type", src: groupJob("dynamic \"templates\" {\n for_each = [1]\n content {}\n}", ""), err: `unknown block "templates" in group "g"`, pos: "3:9"},
		{name: "error inside the content", src: groupJob("", "dynamic \"template\" {\n for_each = [1]\n content {\n data = 1\n dest = \"x\"\n }\n}"), err: `unknown attribute "dest" in template block`, pos: "13:2"},
		{name: "single block generated twice", src: groupJob("dynamic \"ephemeral_disk\" {\n for_each = [1, 2]\n content { size = 100 }\n}", ""), err: `duplicate ephemeral_disk block in group "g"`, pos: "3:9"},
		{name: "in a meta block", src: groupJob("meta {\n dynamic \"x\" {\n for_each = [1]\n content {}\n }\n}", ""), err: `"dynamic" in meta block in group "g" is an attribute, not a block`, pos: "4:2"},
		{name: "at the top of the file", src: "dynamic \"job\" {\n for_each = [1]\n content {}\n}\n", err: "a dynamic block may not be at the top of the job file", pos: "1:1"},
		// 60 times 1,000 values and 1,000 generated blocks: the
		// expansion stops at the budget's element limit.
		{name: "too many blocks", src: groupJob(strings.Repeat("dynamic \"constraint\" {\n for_each = range(1000)\n content {}\n}\n", 60), ""), err: "would build more than 100000 collection elements"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Parse([]byte(tt.src), "d.hcl", ParseOptions{})
			if tt.err == "" {
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, tt.src)
				}
				tt.check(t, j)
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q\n%s", tt.err, tt.src)
			}
			if !errors.Is(err, ErrInvalidJob) {
				t.Errorf("error does not match ErrInvalidJob: %v", err)
			}
			first := strings.SplitN(err.Error(), "\n", 2)[0]
			if !strings.Contains(first, tt.err) || (tt.pos != "" && !strings.HasPrefix(first, "d.hcl:"+tt.pos+": ")) {
				t.Errorf("first error %q, want d.hcl:%s: ...%s...", first, tt.pos, tt.err)
			}
		})
	}
}

// The attribute forms of a constraint are read as Nomad 1.6.5 reads them.
func TestConstraintAttributeForms(t *testing.T) {
	tests := []struct {
		body string
		want Constraint // Pos not compared; zero Operator: no constraint
		err  string
		warn string
	}{
		{body: `distinct_hosts = true`, want: Constraint{Operator: "distinct_hosts"}, warn: "distinct_hosts constraint in group"},
		{body: `distinct_hosts = false`, warn: "distinct_hosts = false constrains nothing"},
		{body: `distinct_hosts = "yes"`, err: "distinct_hosts in constraint in group \"g\" must be true or false"},
		{body: `distinct_property = "${meta.rack}"`, want: Constraint{Attribute: "${meta.rack}", Operator: "distinct_property"}},
		{body: "attribute = \"${attr.os.name}\"\nregexp = \"^deb\"", want: Constraint{Attribute: "${attr.os.name}", Operator: "regexp", Value: "^deb"}},
		{body: "attribute = \"${attr.kernel.version}\"\nversion = \">= 3\"", want: Constraint{Attribute: "${attr.kernel.version}", Operator: "version", Value: ">= 3"}},
		{body: "attribute = \"${attr.kernel.version}\"\nsemver = \">= 3.0.0\"", want: Constraint{Attribute: "${attr.kernel.version}", Operator: "semver", Value: ">= 3.0.0"}},
		{body: "attribute = \"${meta.t}\"\nset_contains = \"a\"", want: Constraint{Attribute: "${meta.t}", Operator: "set_contains", Value: "a"}},
		{body: "attribute = \"${meta.t}\"\noperator = \"=\"\nvalue = \"a\"\nset_contains_any = \"a\"", want: Constraint{Attribute: "${meta.t}", Operator: "=", Value: "a"}, warn: "set_contains_any = ... in constraint in group \"g\" is accepted and not applied"},
		{body: "attribute = \"${meta.t}\"\nis_set = \"x\"", err: `constraint with operator "=" in group "g" has no value`},
		{body: "attribute = \"${attr.os.name}\"\nregexp = \"(\"", err: `invalid regexp "("`},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			src := groupJob("count = 2\nconstraint {\n"+tt.body+"\n}", "")
			j, err := Parse([]byte(src), "c.hcl", ParseOptions{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cs := j.Groups[0].Constraints
			switch {
			case tt.want.Operator == "" && len(cs) != 0:
				t.Errorf("constraints %+v, want none", cs)
			case tt.want.Operator != "":
				if len(cs) != 1 {
					t.Fatalf("constraints %+v, want one", cs)
				}
				got := cs[0]
				got.Pos = Pos{}
				if got != tt.want {
					t.Errorf("constraint %+v, want %+v", got, tt.want)
				}
			}
			if tt.warn != "" && !strings.Contains(fmt.Sprint(j.Warnings), tt.warn) {
				t.Errorf("warnings %v, want one containing %q", j.Warnings, tt.warn)
			}
		})
	}
}

// Newer Nomad's schedule and identity blocks are checked as that Nomad
// checks them.
func TestNewerTaskBlocks(t *testing.T) {
	tests := []struct {
		name, task, err string
		check           func(t *testing.T, tk *Task)
	}{
		{name: "schedule", task: "schedule {\n cron {\n start = \"30 9 * * MON-FRI *\"\n end = \"0 16\"\n timezone = \"UTC\"\n }\n}",
			check: func(t *testing.T, tk *Task) {
				if s := tk.Schedule; s == nil || s.Start != "30 9 * * MON-FRI *" || s.End != "0 16" || s.Timezone != "UTC" {
					t.Errorf("schedule %+v", s)
				}
			}},
		{name: "schedule without cron", task: "schedule {}", err: "has no cron block"},
		{name: "schedule start fields", task: "schedule {\n cron {\n start = \"30 9 * * *\"\n end = \"0 16\"\n }\n}", err: "want 6 fields, got 5"},
		{name: "schedule start list", task: "schedule {\n cron {\n start = \"30 9,10 * * * *\"\n end = \"0 16\"\n }\n}", err: `"," and "/" are not allowed`},
		{name: "schedule end hour", task: "schedule {\n cron {\n start = \"30 9 * * * *\"\n end = \"0 24\"\n }\n}", err: "field 2 must be a number from 0 to 23"},
		{name: "schedule no end", task: "schedule {\n cron {\n start = \"30 9 * * * *\"\n }\n}", err: "has no end"},
		{name: "schedule timezone", task: "schedule {\n cron {\n start = \"30 9 * * * *\"\n end = \"0 1\"\n timezone = \"Mars/Base\"\n }\n}", err: `unknown timezone "Mars/Base"`},
		{name: "named identities", task: "identity {\n env = true\n}\nidentity {\n name = \"vault\"\n aud = [\"v\"]\n ttl = \"1h\"\n}",
			check: func(t *testing.T, tk *Task) {
				if tk.Identity == nil || !tk.Identity.Env || len(tk.Identities) != 1 || tk.Identities[0].Name != "vault" || tk.Identities[0].TTL.String() != "1h0m0s" {
					t.Errorf("identity %+v, identities %+v", tk.Identity, tk.Identities)
				}
			}},
		{name: "two default identities", task: "identity {}\nidentity {\n env = true\n}", err: `duplicate identity "default"`},
		{name: "identity signal without signal", task: "identity {\n change_mode = \"signal\"\n}", err: `has change_mode "signal" and no change_signal`},
		{name: "identity change_mode", task: "identity {\n change_mode = \"reload\"\n}", err: "change_mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := Parse([]byte(groupJob("", tt.task)), "n.hcl", ParseOptions{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, j.Groups[0].Tasks[0])
			if len(j.Warnings) == 0 {
				t.Errorf("no warning")
			}
		})
	}
}
