package supervisor

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/cgroup"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the codecs")

// goldenRecords are records as a supervisor of an earlier build wrote them
// (testdata/*.golden, captured before the codecs became tables): a
// supervisor still running an old task is understood after an upgrade
// only if these parse the same, and what this build writes is byte for
// byte what the old one wrote.
func goldenRecords() []struct {
	file  string
	value interface{ Marshal() []byte }
	parse func([]byte) (any, error)
} {
	spec := func(b []byte) (any, error) { return ParseSpec(b) }
	status := func(b []byte) (any, error) { return ParseStatus(b) }
	enter := func(b []byte) (any, error) { return ParseEnterSpec(b) }
	return []struct {
		file  string
		value interface{ Marshal() []byte }
		parse func([]byte) (any, error)
	}{
		{"spec-full.golden", &Spec{
			StoreID: "s", AllocID: "a", Task: "web server",
			Path: "/bin/sh", Args: []string{"sh", "-c", "echo \"hi\"\n\x00tab\t"}, Env: []string{"A=1", "B=two words"},
			Dir:         "/",
			Credentials: Credentials{SetUser: true, UID: 65534, GID: 65534, Groups: []int{65534, 4}, SetCaps: true, Caps: []int{0, 10}, Seccomp: true},
			OOMScoreAdj: 500,
			Root:        "/a/web", Mounts: []Mount{{Source: "/bin", Dest: "/bin", ReadOnly: true}, {Source: "/a/alloc", Dest: "/alloc", Propagation: PropagationSlave}},
			NewPIDNS: true, NewIPCNS: true,
			Cgroup: &cgroup.Set{Rel: "berth/s.a.web", Unified: "/sys/fs/cgroup/unified/berth/s.a.web", V1: []string{"/m", "/p"}},
			LogDir: "/a", Stdout: "web.stdout", Stderr: "web.stderr", LogMaxFiles: 3, LogMaxSize: 1 << 20,
			StatusDir: "/a", StatusName: "web.status",
		}, spec},
		{"spec-raw.golden", &Spec{
			StoreID: "s", AllocID: "a", Task: "t", Path: "/usr/bin/sleep", Args: []string{"sleep", "1000"},
			Credentials: Credentials{SetCaps: true},
			StatusDir:   "/d", StatusName: "t.status",
		}, spec},
		{"status-full.golden", &Status{StoreID: "s", AllocID: "a", Task: "t", SupervisorPID: 10, SupervisorStart: 99, PID: 11, PIDStart: 100,
			ExitCode: 137, Signal: 9, OOMKilled: true, StartedAt: time.Unix(1, 2), FinishedAt: time.Unix(3, 4), Error: "x \"y\""}, status},
		{"status-ok.golden", &Status{StoreID: "s", AllocID: "a", Task: "t", SupervisorPID: 10, PID: 11,
			StartedAt: time.Unix(1700000000, 5), FinishedAt: time.Unix(1700000100, 6)}, status},
		{"enter-full.golden", &EnterSpec{
			Args: []string{"sh", "-c", "echo \"a b\"\n"}, Env: []string{"PATH=/bin", "X=1=2"},
			Credentials: Credentials{SetUser: true, UID: 65534, GID: 65534, Groups: []int{65534, 27}, SetCaps: true, Caps: []int{10}, Seccomp: true},
			Dir:         "/local",
			Cgroup:      &cgroup.Set{Rel: "berth/x.y.t", Unified: "/sys/fs/cgroup/unified/berth/x.y.t", V1: []string{"/sys/fs/cgroup/memory/berth/x.y.t"}},
			Net:         true, IPC: true, Mnt: true, PID: true, Root: true, TTY: true,
		}, enter},
		{"enter-raw.golden", &EnterSpec{Args: []string{"id"}, Net: true}, enter},
	}
}

func TestCodecGolden(t *testing.T) {
	for _, g := range goldenRecords() {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", g.file)
			if *update {
				if err := os.WriteFile(path, g.value.Marshal(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := g.parse(old)
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			if !reflect.DeepEqual(got, g.value) {
				t.Errorf("%s parses as\n %+v\nwant %+v", path, got, g.value)
			}
			if b := g.value.Marshal(); string(b) != string(old) {
				t.Errorf("written differently from %s:\n%s\nwant\n%s", path, b, old)
			}
		})
	}
}

// A record with a key of no field is refused (spec, enter) or passed
// over (status: written by a newer supervisor, read by an older berth).
func TestCodecUnknownKeys(t *testing.T) {
	spec, _ := os.ReadFile(filepath.Join("testdata", "spec-raw.golden"))
	if _, err := ParseSpec(append(spec, "bogus \"1\"\n"...)); err == nil || !strings.Contains(err.Error(), `unknown key "bogus"`) {
		t.Errorf("spec with an unknown key: %v", err)
	}
	enter, _ := os.ReadFile(filepath.Join("testdata", "enter-raw.golden"))
	if _, err := ParseEnterSpec(append(enter, "bogus \"1\"\n"...)); err == nil || !strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Errorf("enter spec with an unknown key: %v", err)
	}
	status, _ := os.ReadFile(filepath.Join("testdata", "status-ok.golden"))
	if _, err := ParseStatus(append(status, "bogus \"1\"\n"...)); err != nil {
		t.Errorf("status with an unknown key: %v", err)
	}
}
