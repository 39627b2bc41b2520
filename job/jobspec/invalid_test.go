package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/job/jobspec/jobspectest"
)

// Each file in testdata/invalid must be rejected with ErrInvalidJob, with
// its first diagnostic at pos and containing the substrings.
func TestInvalidJobs(t *testing.T) {
	tests := []struct {
		file string
		pos  string // line:col of the first diagnostic
		want []string
	}{
		{"dynamic_block", "4:18", []string{`for_each of dynamic "task" must be a list, set, map or object, got number 3`}},
		{"syntax_error", "2:18", []string{"Missing newline after argument"}},
		{"missing_job_label", "1:1", []string{"missing its job ID label", `job "<job ID>"`}},
		{"two_jobs", "12:1", []string{"duplicate job block", "first is at testdata/invalid/two_jobs.hcl:1:1"}},
		{"no_group", "1:1", []string{`job "j" has no group`}},
		{"no_task", "2:3", []string{`group "g" has no task`}},
		{"unknown_block_job", "3:3", []string{`unknown block "deployment" in job "j"`, "valid blocks: affinity, constraint, group, meta, migrate, multiregion, parameterized, periodic, reschedule, spread, task, update, vault"}},
		{"unknown_attr_job", "3:3", []string{`unknown attribute "all_at_onc" in job "j"`, `did you mean "all_at_once"?`}},
		{"unknown_attr_group", "4:5", []string{`unknown attribute "cont" in group "g"`, `did you mean "count"?`}},
		{"unknown_attr_task", "6:7", []string{`unknown attribute "kill_signals" in task "t" in group "g"`, `did you mean "kill_signal"?`}},
		{"unknown_block_task", "6:7", []string{`unknown block "templates" in task "t"`, `did you mean "template"?`}},
		{"unknown_attr_network", "6:7", []string{`unknown attribute "bandwidth" in network block in group "g"`, "valid attributes: hostname, mbits, mode"}},
		{"unknown_attr_periodic", "5:5", []string{`unknown attribute "spec" in periodic block`, "cron, crons, enabled"}},
		{"unknown_attr_restart", "6:7", []string{`unknown attribute "render_templates" in restart block`, "attempts, delay, interval, mode"}},
		{"unknown_attr_constraint", "5:5", []string{`unknown attribute "versions" in constraint`, `did you mean "version"?`}},
		{"block_as_attribute", "4:5", []string{`"restart" in group "g" is a block, not an attribute`, "restart { ... }"}},
		{"missing_driver", "4:5", []string{`task "t" has no driver`, `add driver = "<name>"`, "known drivers: exec, podman, raw_exec"}},
		{"bad_network_mode", "5:14", []string{`invalid network mode "bridged"`, `"host", "none", "bridge" or "cni/<network name>"`}},
		{"duplicate_network", "7:5", []string{"duplicate network block in group", "first is at testdata/invalid/duplicate_network.hcl:4:5"}},
		{"bad_cron", "4:31", []string{`invalid cron "every minute"`, "a Nomad cron has 5 fields (min hour dom month dow), 6 (+year) or 7 (seconds first)"}},
		{"cron_too_many_fields", "4:12", []string{`invalid cron "0 0 * * * * * 2030": 8 fields`}},
		{"bad_time_zone", "5:17", []string{`invalid time_zone "Mars/Olympus_Mons"`, "IANA zone name"}},
		{"periodic_service", "3:3", []string{`periodic can only be used with "batch" or "sysbatch" jobs`, `set type = "batch"`}},
		{"negative_count", "4:13", []string{"count must be >= 0, got -1", `group "g"`}},
		{"number_out_of_range", "5:11", []string{"number 1e99999999 is out of range"}},
		{"fractional_count", "4:13", []string{"must be a whole number, got 1.5"}},
		{"priority_range", "3:14", []string{"priority must be <= 100, got 101"}},
		{"bad_duration", "6:22", []string{`invalid duration "5 seconds" for kill_timeout`, `"30s", "5m" or "1h30m"`}},
		{"duplicate_group", "11:9", []string{`duplicate group "g" in job "j"`, "first is at testdata/invalid/duplicate_group.hcl:3:3"}},
		{"duplicate_task", "10:10", []string{`duplicate task "t" in group "g"`, "first is at testdata/invalid/duplicate_task.hcl:4:5"}},
		{"constraint_bad_regexp", "6:17", []string{`invalid regexp "lin(ux"`, "missing closing )"}},
		{"restart_mode", "6:18", []string{`invalid restart mode "retry"`, `"fail"`, `"delay"`}},
		{"restart_zero_attempts_delay", "4:5", []string{`mode "delay" and 0 attempts is ambiguous`}},
		{"port_bad_to", "7:14", []string{"to must be <= 65535, got 70000", `port "http"`}},
		{"dns_not_ip", "7:19", []string{`dns server "one.one.one.one" is not an IP address`}},
		{"env_bad_type", "6:13", []string{"env in task", "must be a map of strings, got tuple"}},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "invalid", tt.file+".hcl")
			job, err := ParseFile(path, testOptions())
			if err == nil {
				t.Fatalf("parsed without error: %+v", job)
			}
			if job != nil {
				t.Errorf("returned a job with an error")
			}
			if !errors.Is(err, ErrInvalidJob) {
				t.Errorf("errors.Is(err, ErrInvalidJob) = false for %T: %v", err, err)
			}
			first := strings.SplitN(err.Error(), "\n", 2)[0]
			if prefix := path + ":" + tt.pos + ": "; !strings.HasPrefix(first, prefix) {
				t.Errorf("first error %q does not start with %q", first, prefix)
			}
			for _, s := range tt.want {
				if !strings.Contains(first, s) {
					t.Errorf("first error %q lacks %q", first, s)
				}
			}
		})
	}
	// Every bad file is in the table, so none is silently unchecked.
	files, err := filepath.Glob("testdata/invalid/*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".hcl"); !covered[name] {
			t.Errorf("%s has no entry in the table", f)
		}
	}
}

// TestNestingLimit: a file nested 100,000 deep (it overflowed the HCL
// parser's stack) is refused with a positioned error before parsing.
func TestNestingLimit(t *testing.T) {
	for name, src := range map[string]string{
		"lists":          "job \"x\" {\n  meta { x = " + strings.Repeat("[", 100000) + " }\n}\n",
		"interpolations": "job \"x\" {\n  meta { x = \"" + strings.Repeat("${\"", 60000) + " }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(src), "deep.hcl", testOptions())
			var diags Diagnostics
			if !errors.As(err, &diags) || len(diags) == 0 || diags[0].Line != 2 || !strings.Contains(diags[0].Summary, "Nested too deeply") {
				t.Fatalf("got %v, want a positioned 'Nested too deeply' at line 2", err)
			}
		})
	}
}

// FuzzParse checks that no input panics, that errors are always positioned
// Diagnostics matching ErrInvalidJob, and that accepted jobs marshal and can
// compute their next launch.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/*.hcl", "testdata/invalid/*.hcl", "testdata/corpus/*.hcl"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			src, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src)
		}
	}
	// The evaluation bombs of issue 18, as the budget tests send them
	// (also checked in as testdata/fuzz/FuzzParse: TestFuzzCorpusParse).
	for _, b := range jobspectest.EvalBombs {
		f.Add(parseSeed(b))
	}
	// A short deadline keeps CI's fixed count of inputs fast: mutations
	// of a bomb that the size limits let through stop at it.
	opts := testOptions()
	opts.EvalTimeout = 100 * time.Millisecond
	f.Fuzz(func(t *testing.T, src []byte) {
		job, err := Parse(src, "fuzz.hcl", opts)
		if err != nil {
			if job != nil {
				t.Fatal("job and error both returned")
			}
			var diags Diagnostics
			if !errors.As(err, &diags) || len(diags) == 0 || !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("error is not non-empty Diagnostics: %T %v", err, err)
			}
			for _, d := range diags {
				if d.File != "fuzz.hcl" || d.Line < 1 || d.Column < 1 || d.Summary == "" {
					t.Fatalf("badly positioned diagnostic: %+v", d)
				}
			}
			return
		}
		if job == nil || len(job.Groups) == 0 {
			t.Fatal("no error and no usable job")
		}
		if _, err := json.Marshal(job); err != nil {
			t.Fatalf("marshal accepted job: %v", err)
		}
		if job.Periodic != nil {
			job.Periodic.NextN(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 3)
		}
	})
}

// parseSeed is bomb b as FuzzParse's input: the job file the budget tests
// parse.
func parseSeed(b jobspectest.Bomb) []byte { return []byte(jobspectest.WithGroup(b.Src)) }

// FuzzParse's checked-in corpus holds every evaluation bomb.
func TestFuzzCorpusParse(t *testing.T) {
	jobspectest.CheckCorpus(t, filepath.Join("testdata", "fuzz", "FuzzParse"), parseSeed)
}
