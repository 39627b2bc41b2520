package node

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// The names of the node's settings: the HCL key is the flag with '_' for
// '-' and a block's name in front. Changing one breaks config files and
// scripts: keep the old spelling as an alias tag.
func TestSettingNames(t *testing.T) {
	var got []string
	for _, s := range Settings(&Config{}) {
		got = append(got, s.Path+"="+s.Flag)
	}
	want := []string{
		"data_dir=data-dir", "netns_dir=netns-dir", "lock_dir=lock-dir",
		"cni_config_dir=cni-config-dir", "cni_path=cni-path", "cni_cache_dir=cni-cache-dir",
		"podman_socket=podman-socket", "podman_allow_privileged=podman-allow-privileged",
		"docker_endpoint=docker-endpoint", "docker_allow_privileged=docker-allow-privileged", "docker_pause_image=docker-pause-image", "log_level=log-level", "log_format=log-format",
		"bridge.network=bridge-network", "bridge.iface=bridge-iface", "bridge.subnet=bridge-subnet",
		"client.cpu_total_compute=client-cpu-total-compute", "client.memory_total_mb=client-memory-total-mb",
		"client.max_allocs=client-max-allocs", "client.start_workers=client-start-workers", "client.max_pending_launches=client-max-pending-launches",
		"client.max_kill_timeout=client-max-kill-timeout", "client.network_interface=client-network-interface",
		"client.reserved.cpu=client-reserved-cpu", "client.reserved.memory=client-reserved-memory", "client.host_volume=client-host-volume",
		"tasks.raw_exec_enabled=tasks-raw-exec-enabled", "tasks.user_denylist=tasks-user-denylist",
		"tasks.user_checked_drivers=tasks-user-checked-drivers", "tasks.chroot_env=",
		"tasks.allow_caps=tasks-allow-caps", "tasks.allow_host_pid_mode=tasks-allow-host-pid-mode",
		"tasks.allow_host_ipc_mode=tasks-allow-host-ipc-mode", "tasks.exec_seccomp=tasks-exec-seccomp",
		"artifact.http_read_timeout=artifact-http-read-timeout", "artifact.http_max_size=artifact-http-max-size",
		"artifact.decompression_size_limit=artifact-decompression-size-limit",
		"artifact.decompression_file_count_limit=artifact-decompression-file-count-limit",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("settings:\n got %v\nwant %v", got, want)
	}
	for _, s := range Settings(&Config{}) {
		if s.Help == "" {
			t.Errorf("%s has no help", s.Path)
		}
	}
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.RunnerBridge().Iface != "berth0" {
		t.Errorf("bridge: %+v", c.RunnerBridge())
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want []string // nil means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"no bridge block", func(c *Config) { c.Bridge = nil }, nil},
		{"relative data dir", func(c *Config) { c.DataDir = "data" }, []string{"data_dir (--data-dir)", "absolute"}},
		{"relative lock dir", func(c *Config) { c.LockDir = "lock" }, []string{"lock_dir (--lock-dir)"}},
		{"no plugin path", func(c *Config) { c.CNIPath = nil }, []string{"cni_path (--cni-path) must name"}},
		{"relative plugin dir", func(c *Config) { c.CNIPath = []string{"/opt/cni/bin", "bin"} }, []string{"cni_path", `"bin"`}},
		{"relative podman socket", func(c *Config) { c.PodmanSocket = "p.sock" }, []string{"podman_socket (--podman-socket)"}},
		{"bad log level", func(c *Config) { c.LogLevel = "loud" }, []string{"log_level (--log-level)", "debug, info"}},
		{"bad log format", func(c *Config) { c.LogFormat = "xml" }, []string{"log_format (--log-format)"}},
		{"bad subnet", func(c *Config) { c.Bridge.Subnet = "10.199.1.0" }, []string{"bridge subnet"}},
		{"long bridge", func(c *Config) { c.Bridge.Iface = "averyveryverylongname" }, []string{"bridge iface", "15"}},
		{"two problems", func(c *Config) { c.NetnsDir = "ns"; c.LogFormat = "xml" }, []string{"netns_dir", "log_format"}},
		{"no client block", func(c *Config) { c.Client = nil }, nil},
		{"negative reserve", func(c *Config) { c.Client.Reserved.MemoryMB = -1 }, []string{"client.reserved.memory (--client-reserved-memory) -1 must not be negative"}},
		{"no allocations", func(c *Config) { c.Client.MaxAllocs = 0 }, []string{"client.max_allocs (--client-max-allocs)"}},
		{"no start workers", func(c *Config) { c.Client.StartWorkers = 0 }, []string{"client.start_workers"}},
		{"negative pending launches", func(c *Config) { c.Client.MaxPendingLaunches = -1 }, []string{"client.max_pending_launches"}},
		{"bad max kill timeout", func(c *Config) { c.Client.MaxKillTimeout = "forever" }, []string{"client.max_kill_timeout", `"forever"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestAbs(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.DataDir, c.CNIPath, c.PodmanSocket = "data", []string{"bin", "/abs"}, ""
	def := Default()
	if err := c.Abs(); err != nil {
		t.Fatal(err)
	}
	if c.DataDir != filepath.Join(wd, "data") || c.CNIPath[0] != filepath.Join(wd, "bin") || c.CNIPath[1] != "/abs" {
		t.Errorf("not made absolute: %+v", c)
	}
	if c.PodmanSocket != "" || c.NetnsDir != def.NetnsDir {
		t.Errorf("changed what was empty or absolute: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestNewLogger(t *testing.T) {
	var b strings.Builder
	c := Default()
	c.LogFormat, c.LogLevel = "json", "warn"
	log, err := c.NewLogger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if out := b.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Errorf("log: %q", out)
	}
	c.LogFormat = "xml"
	if _, err := c.NewLogger(&b); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("bad format: %v", err)
	}
}

// own is a program's settings beside the node's, as the agent has them.
type own struct {
	Config
	Interval string `hcl:"interval,optional" help:"how often"`
	Count    int    `hcl:"count,optional" help:"how many"`
	Server   *struct {
		Socket string `hcl:"socket,optional" alias:"socket" help:"where"`
		Secret string `hcl:"secret,optional" flag:"-"`
	} `hcl:"server,block"`
}

func newOwn() own {
	o := own{Config: Default(), Interval: "5m", Count: 3}
	o.Server = &struct {
		Socket string `hcl:"socket,optional" alias:"socket" help:"where"`
		Secret string `hcl:"secret,optional" flag:"-"`
	}{Socket: "/run/x.sock"}
	return o
}

// A flag given wins over the file; a flag's default does not; an alias
// sets its setting; a secret has no flag.
func TestFlagsOverlayFile(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	nodeFlags, d := Default(), newOwn()
	nf := BindFlags(fs, &nodeFlags)
	of := BindFlags(fs, &d)
	for _, name := range []string{"data-dir", "cni-path", "bridge-subnet", "interval", "count", "server-socket"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
	if f := fs.Lookup("socket"); f == nil || !f.Hidden || f.Deprecated == "" {
		t.Errorf("alias --socket: %+v", f)
	}
	if fs.Lookup("server-secret") != nil {
		t.Error("a flag:\"-\" setting has a flag")
	}
	err := fs.Parse([]string{"--data-dir", "/flag", "--cni-path", "/a::/b", "--bridge-iface", "flag0", "--count", "7", "--socket", "/flag.sock"})
	if err != nil {
		t.Fatal(err)
	}

	file := newOwn()
	src := `
data_dir  = "/file"
log_level = "debug"
interval  = "1m"
count     = 5
bridge {
  iface  = "file0"
  subnet = "10.199.114.0/24"
}
server {
  secret = "s3cret"
}
`
	if err := DecodeHCL([]byte(src), "f.hcl", &file.Config, &file); err != nil {
		t.Fatal(err)
	}
	nf.Overlay(&file.Config)
	of.Overlay(&file)

	want := newOwn()
	want.DataDir = "/flag"                 // flag over file
	want.CNIPath = []string{"/a", "/b"}    // flag over default, empty entries dropped
	want.LogLevel = "debug"                // file, no flag
	want.Bridge.Iface = "flag0"            // flag over file, inside a block
	want.Bridge.Subnet = "10.199.114.0/24" // file
	want.Interval = "1m"                   // file
	want.Count = 7                         // flag over file
	want.Server.Socket = "/flag.sock"      // through the alias
	want.Server.Secret = "s3cret"
	if !reflect.DeepEqual(file, want) {
		t.Errorf("overlay:\n got %+v %+v %+v\nwant %+v %+v %+v", file, *file.Bridge, *file.Server, want, *want.Bridge, *want.Server)
	}
	if !of.Changed("server.socket") || nf.Changed("netns_dir") {
		t.Error("Changed")
	}
	// The overlay copied the list: the flag's own value is not shared.
	nodeFlags.CNIPath[0] = "/changed"
	if file.CNIPath[0] != "/a" {
		t.Error("overlay shares the flag's list")
	}
}

func TestDecodeHCLErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unknown key, node's suggested", `data_dri = "/x"`, `f.hcl:1:1: Unsupported argument; An argument named "data_dri" is not expected here. Did you mean "data_dir"?`},
		{"unknown key, program's suggested", `intervl = "1m"`, `Did you mean "interval"?`},
		{"unknown block", "servr {\n}\n", `f.hcl:1:1: Unsupported block type`},
		{"unknown key in block", "bridge {\n  ifac = \"x\"\n}\n", `f.hcl:2:3: Unsupported argument`},
		{"wrong type", `count = "many"`, `a number is required`},
		{"syntax", `data_dir = `, `f.hcl:1`},
		{"duplicate block", "bridge {\n}\nbridge {\n}\n", `Duplicate bridge block`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwn()
			err := DecodeHCL([]byte(tc.src), "f.hcl", &o.Config, &o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if n := strings.Count(err.Error(), "\n"); n != 0 {
				t.Errorf("%d problems reported for one: %v", n+1, err)
			}
		})
	}
}

// What the file leaves out keeps its default, blocks included.
func TestDecodeHCLOverDefaults(t *testing.T) {
	o := newOwn()
	if err := DecodeHCL([]byte("bridge {\n  subnet = \"10.199.115.0/24\"\n}\n"), "f.hcl", &o.Config, &o); err != nil {
		t.Fatal(err)
	}
	want := newOwn()
	want.Bridge.Subnet = "10.199.115.0/24"
	if !reflect.DeepEqual(o, want) {
		t.Errorf("got %+v %+v, want %+v %+v", o, *o.Bridge, want, *want.Bridge)
	}
}

// The capacity: what the file says, else what /proc and /sys say, less
// the reserve; a reserve that leaves nothing is an error naming it.
func TestCapacity(t *testing.T) {
	c := Default()
	capa, err := c.Capacity()
	if err != nil {
		t.Fatal(err)
	}
	if capa.CPU < 100 || capa.MemoryMB < 64 || capa.Allocs != DefaultMaxAllocs || capa.Cores < 1 || capa.TotalCPU != capa.CPU {
		t.Errorf("detected: %+v", capa)
	}
	c.Client.CPUTotalCompute, c.Client.MemoryTotalMB = 4000, 8000
	c.Client.Reserved.CPU, c.Client.Reserved.MemoryMB = 500, 1000
	capa, err = c.Capacity()
	if err != nil || capa.CPU != 3500 || capa.MemoryMB != 7000 || capa.TotalCPU != 4000 || capa.TotalMemoryMB != 8000 {
		t.Errorf("configured: %+v %v", capa, err)
	}
	c.Client.Reserved.MemoryMB = 8000
	if _, err := c.Capacity(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "client.reserved.memory") {
		t.Errorf("a reserve of everything: %v", err)
	}
	if got := cpuinfoMHz([]byte("processor\t: 0\ncpu MHz\t\t: 2445.406\nprocessor\t: 1\ncpu MHz\t\t: 3100.000\n")); got != 3100 {
		t.Errorf("cpuinfo MHz %d", got)
	}
	if got := meminfoTotalMB([]byte("MemTotal:       24683520 kB\nMemFree:  1 kB\n")); got != 24105 {
		t.Errorf("meminfo MB %d", got)
	}
}

// The artifact limits: Nomad's defaults, sizes with units, refusals that
// name the setting.
func TestArtifactSecLimits(t *testing.T) {
	c := Default()
	testenvMust(t, c.Validate())
	if l := c.ArtifactLimits(); l.HTTPMaxSize != 100e9 || l.DecompressionFileCountLimit != 4096 || l.HTTPReadTimeout != 30*time.Minute {
		t.Errorf("defaults: %+v", l)
	}
	c.Artifact = &Artifact{HTTPReadTimeout: "5s", HTTPMaxSize: "1MiB", DecompressionSizeLimit: "2KB", DecompressionFileCountLimit: 3}
	testenvMust(t, c.Validate())
	if l := c.ArtifactLimits(); l.HTTPMaxSize != 1<<20 || l.DecompressionSizeLimit != 2000 || l.DecompressionFileCountLimit != 3 || l.HTTPReadTimeout != 5*time.Second {
		t.Errorf("set: %+v", l)
	}
	c.Artifact = &Artifact{HTTPReadTimeout: "soon", HTTPMaxSize: "lots", DecompressionSizeLimit: "-1", DecompressionFileCountLimit: 0}
	err := c.Validate()
	for _, want := range []string{"artifact.http_read_timeout", "artifact.http_max_size (--artifact-http-max-size) \"lots\"", "artifact.decompression_size_limit", "artifact.decompression_file_count_limit"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want it to name %s", err, want)
		}
	}
}

func testenvMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
