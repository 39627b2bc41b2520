package supervisor

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/cgroup"
)

func TestSpecRoundTrip(t *testing.T) {
	in := &Spec{
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
	}
	out, err := ParseSpec(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	if _, err := ParseSpec([]byte(strings.Replace(string(in.Marshal()), `version "1"`, `version "9"`, 1))); err == nil ||
		!strings.Contains(err.Error(), "install the berth-supervisor built with this berth") {
		t.Fatalf("another version: %v", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	in := &Status{StoreID: "s", AllocID: "a", Task: "t", SupervisorPID: 10, SupervisorStart: 99, PID: 11, PIDStart: 100,
		ExitCode: 137, Signal: 9, OOMKilled: true, StartedAt: time.Unix(1, 2), FinishedAt: time.Unix(3, 4), Error: "x"}
	out, err := ParseStatus(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestIdentity(t *testing.T) {
	cmdline := []byte(strings.Join(Args("/usr/local/bin/berth-supervisor", "s1", "a1", "web"), "\x00") + "\x00")
	if !IsSupervisorOf(cmdline, "s1", "a1", "web") {
		t.Fatal("not recognised")
	}
	for _, other := range [][3]string{{"s2", "a1", "web"}, {"s1", "a2", "web"}, {"s1", "a1", "db"}} {
		if IsSupervisorOf(cmdline, other[0], other[1], other[2]) {
			t.Fatalf("taken for %v", other)
		}
	}
	if s, a, task, ok := Identity(cmdline); !ok || s != "s1" || a != "a1" || task != "web" {
		t.Fatalf("Identity = %q %q %q %v", s, a, task, ok)
	}
	if IsSupervisorOf([]byte("sleep\x001000\x00"), "s1", "a1", "web") {
		t.Fatal("sleep taken for a supervisor")
	}
}

func TestParseReady(t *testing.T) {
	if pid, start, err := ParseReady(readyLine(42, 7)); err != nil || pid != 42 || start != 7 {
		t.Fatalf("ParseReady = %d %d %v", pid, start, err)
	}
	if _, _, err := ParseReady(`err "no such file"` + "\n"); err == nil || err.Error() != "no such file" {
		t.Fatalf("ParseReady(err) = %v", err)
	}
}

func TestEnterSpecRoundTrip(t *testing.T) {
	in := &EnterSpec{
		Args: []string{"sh", "-c", "echo \"a b\"\n"}, Env: []string{"PATH=/bin", "X=1=2"},
		Credentials: Credentials{SetUser: true, UID: 65534, GID: 65534, Groups: []int{65534, 27}, SetCaps: true, Caps: []int{10}, Seccomp: true},
		Dir:         "/local",
		Cgroup:      &cgroup.Set{Rel: "berth/x.y.t", Unified: "/sys/fs/cgroup/unified/berth/x.y.t", V1: []string{"/sys/fs/cgroup/memory/berth/x.y.t"}},
		Net:         true, Mnt: true, PID: true, Root: true, TTY: true,
	}
	out, err := ParseEnterSpec(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
	if _, err := ParseEnterSpec([]byte("version \"1\"\n")); err == nil {
		t.Error("a spec without a command parsed")
	}
}
