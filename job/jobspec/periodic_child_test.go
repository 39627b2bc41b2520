package jobspec

import (
	"testing"
	"time"
)

func TestPeriodicChildID(t *testing.T) {
	at := time.Unix(1764763200, 0)
	if got := PeriodicChildID("backup", at); got != "backup/periodic-1764763200" {
		t.Errorf("PeriodicChildID = %q", got)
	}
	cases := []struct {
		id, parent string
		unix       int64
		ok         bool
	}{
		{"backup/periodic-1764763200", "backup", 1764763200, true},
		{"a.b-c/periodic-0", "a.b-c", 0, true},
		{"backup", "", 0, false},
		{"/periodic-12", "", 0, false},
		{"backup/periodic-", "", 0, false},
		{"backup/periodic-12x", "", 0, false},
		{"backup/periodic--12", "", 0, false},
		{"backup/periodic-99999999999999999999", "", 0, false},
		{"backup/dispatch-12-0123abcd", "", 0, false},
	}
	for _, tc := range cases {
		parent, launch, ok := ParsePeriodicChildID(tc.id)
		if ok != tc.ok || parent != tc.parent || (ok && launch.Unix() != tc.unix) {
			t.Errorf("ParsePeriodicChildID(%q) = %q, %v, %v; want %q, %d, %v", tc.id, parent, launch, ok, tc.parent, tc.unix, tc.ok)
		}
	}
}

// A launch is a child job as Nomad derives it: its own ID and name, the
// parent's ID, no periodic block; the parent unchanged.
func TestPeriodicChild(t *testing.T) {
	j, err := Parse([]byte(`job "nightly" {
  type = "batch"
  periodic {
    crons = ["0 3 * * *"]
  }
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`), "nightly.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	c, err := j.PeriodicChild(at)
	if err != nil {
		t.Fatal(err)
	}
	want := "nightly/periodic-" + "1796266800"
	if c.ID != want || c.Name != want || c.ParentID != "nightly" || c.Periodic != nil || !c.IsPeriodicChild() || c.Dispatched {
		t.Errorf("child: ID %q name %q parent %q periodic %v", c.ID, c.Name, c.ParentID, c.Periodic)
	}
	if j.ID != "nightly" || j.Periodic == nil || j.ParentID != "" || j.IsPeriodicChild() {
		t.Errorf("parent changed: %+v", j)
	}
	if _, err := c.PeriodicChild(at); err == nil {
		t.Error("a child launched a child")
	}
}
