package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
)

// berthBinary is the berth binary TestMain builds for the tests that run
// berth as a process (Ctrl-C on `berth run`, the CLI benchmarks).
var berthBinary testenv.Berth

func TestMain(m *testing.M) { os.Exit(testenv.MainWithBerth(m, &berthBinary)) }

// run executes berth in process and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetArgs(NomadArgs(root, args))
	err := root.Execute()
	return out.String(), errb.String(), err
}

func netnsEntries() []string {
	des, _ := os.ReadDir("/run/netns")
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	sort.Strings(out)
	return out
}

var position = regexp.MustCompile(`\.hcl:\d+:\d+: `)

// Every invalid job file is refused by `berth validate` and `berth run`
// with an error that names file, line and column, and nothing is created.
func TestBadJobFiles(t *testing.T) {
	files, err := filepath.Glob("../job/jobspec/testdata/invalid/*.hcl")
	testenv.Must(t, err)
	if len(files) < 15 {
		t.Fatalf("want at least 15 invalid job files, have %d", len(files))
	}
	confDir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(confDir, "private.conflist"),
		[]byte(`{"cniVersion":"1.1.0","name":"private","plugins":[{"type":"bridge","bridge":"btclibr0","ipam":{"type":"host-local","subnet":"10.199.90.0/24"}}]}`), 0o644))
	before := netnsEntries()
	for _, f := range files {
		for _, cmd := range []string{"validate", "run"} {
			t.Run(cmd+"/"+filepath.Base(f), func(t *testing.T) {
				dataDir := filepath.Join(t.TempDir(), "data")
				_, _, err := run(t, cmd, f, "--cni-config-dir", confDir, "--data-dir", dataDir, "--lock-dir", t.TempDir())
				if err == nil {
					t.Fatal("accepted")
				}
				if !position.MatchString(err.Error()) || !strings.Contains(err.Error(), filepath.Base(f)) {
					t.Errorf("error without file:line:col: %v", err)
				}
				if _, err := os.Stat(dataDir); err == nil {
					t.Errorf("%s created the data dir for an invalid job", cmd)
				}
			})
		}
	}
	if after := netnsEntries(); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("namespaces changed: before %v after %v", before, after)
	}
}

func TestNetCommandErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"net", "up", "x"}, "--network is required"},
		{[]string{"net", "up", "x", "--network", "n", "-p", "80"}, "HOST:CONTAINER"},
		{[]string{"net", "up", "x", "--network", "n", "-p", "1:70000"}, "1 to 65535"},
		{[]string{"net", "up", "x", "--network", "n", "--arg", "novalue"}, "KEY=VALUE"},
		{[]string{"net", "up", "../x", "--network", "n"}, "invalid network namespace name"},
		{[]string{"--log-level", "loud", "version"}, "--log-level"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append(tc.args, "--data-dir", t.TempDir(), "--cni-config-dir", t.TempDir(), "--lock-dir", t.TempDir())
			_, _, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParsePort(t *testing.T) {
	m, err := ParsePort("8080:80/udp")
	if err != nil || m["hostPort"] != 8080 || m["containerPort"] != 80 || m["protocol"] != "udp" {
		t.Errorf("ParsePort: %v %v", m, err)
	}
	if m, _ := ParsePort("1:2"); m["protocol"] != "tcp" {
		t.Errorf("default protocol: %v", m)
	}
}

func TestVersion(t *testing.T) {
	oldV, oldC := Version, Commit
	t.Cleanup(func() { Version, Commit = oldV, oldC })
	cases := []struct {
		name            string
		version, commit string
		json            bool
		want            []string
	}{
		{"stamped", "v0.2.0-3-gabc1234-dirty", "abc1234def-dirty", false,
			[]string{"berth v0.2.0-3-gabc1234-dirty\n", "commit abc1234def-dirty\n", "built with go"}},
		{"stamped json", "v0.2.0", "abc1234def", true,
			[]string{`"version": "v0.2.0"`, `"commit": "abc1234def"`, `"go_version": "go`}},
		// go test records no VCS revision in the test binary.
		{"unstamped", "0.1.0-dev", "", false, []string{"berth 0.1.0-dev\n", "commit unknown\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			Version, Commit = tc.version, tc.commit
			args := []string{"version"}
			if tc.json {
				args = append(args, "--json")
			}
			out, _, err := run(t, args...)
			testenv.Must(t, err)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
		})
	}
}

// `berth agent`: a flag given wins over the file, a flag's default never
// does, and the old spellings of the API flags still work (deprecated).
func TestAgentFlagsOverFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.hcl")
	testenv.Must(t, os.WriteFile(file, []byte(`
data_dir  = "/file/data"
gc_mode   = "records"
retention = 7
bridge {
  iface  = "file0"
  subnet = "10.199.114.0/24"
}
api {
  socket = "/file/b.sock"
}
`), 0o600))
	fromFile := func(c *agent.Config) {
		c.File = file
		c.DataDir, c.GCMode, c.Retention = "/file/data", "records", 7
		c.Bridge.Iface, c.Bridge.Subnet = "file0", "10.199.114.0/24"
		c.API.Socket = "/file/b.sock"
	}
	cases := []struct {
		name       string
		args       []string
		want       func(*agent.Config)
		deprecated string
	}{
		{"file only", []string{"agent", "-config", file}, fromFile, ""},
		{"flags over file", []string{"--data-dir", "/flag/data", "agent", "-config", file, "-bridge-iface", "flag0", "--api-socket", "/flag/b.sock", "--gc-interval", "1m", "--cni-path", "/a:/b"},
			func(c *agent.Config) {
				fromFile(c)
				c.DataDir, c.Bridge.Iface, c.API.Socket, c.GCInterval, c.CNIPath = "/flag/data", "flag0", "/flag/b.sock", "1m", []string{"/a", "/b"}
			}, ""},
		{"old spellings", []string{"agent", "--config", file, "--socket", "/old/b.sock", "--tcp-address", "127.0.0.1:0", "--token-file", "/old/token"},
			func(c *agent.Config) {
				fromFile(c)
				c.API.Socket, c.API.TCPAddress, c.API.TokenFile = "/old/b.sock", "127.0.0.1:0", "/old/token"
			}, "--socket has been deprecated, use --api-socket"},
		{"flags without a file", []string{"agent", "--retention", "3", "--bridge-subnet", "10.199.115.0/24"},
			func(c *agent.Config) { c.Retention, c.Bridge.Subnet = 3, "10.199.115.0/24" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			g := &Globals{Config: node.Default(), stdout: &out, stderr: &errb}
			var got *agent.Config
			g.runAgent = func(_ context.Context, c agent.Config) error { got = &c; return nil }
			root := newRoot(g)
			root.SetArgs(tc.args)
			testenv.Must(t, root.Execute())
			want := agent.DefaultConfig()
			tc.want(&want)
			if got == nil || !reflect.DeepEqual(*got, want) {
				t.Fatalf("config:\n got %+v\nwant %+v", got, want)
			}
			if tc.deprecated != "" && !strings.Contains(errb.String(), tc.deprecated) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.deprecated)
			}
		})
	}
}
