// Package node is this machine's berth: the settings every berth process
// on it must agree on (one Config, read by the CLI's flags and the agent's
// HCL file alike, under one name each) and the one constructor of the
// objects they configure (New and Open): the store, the netns manager, the
// CNI client, the attachment manager, the drivers and the runner.
//
// Its folder is the node's group: the agent (node/agent) and its status
// page (node/ui), gc (node/gc), the Nomad janitor (node/nomad), metrics
// (node/metrics) and doctor (node/doctor). They may import jobs, tasks,
// the network core and the foundations (internal/..., store, api), never
// the command line above them; layers_test.go holds them to it.
package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/netns"
	execdrv "github.com/berth/berth/task/driver/exec"
)

// DefaultDataDir is where berth keeps its store.
const DefaultDataDir = "/var/lib/berth"

// ErrInvalidConfig is matched (errors.Is) by every error of Validate.
var ErrInvalidConfig = errors.New("invalid configuration")

// Config is the node's configuration. A field's hcl tag is the setting's
// one name: its key in the agent's file and, with '-' for '_' (and the
// block's name in front inside a block), its flag (see Settings). help is
// the flag's usage; alias lists old flag spellings, accepted but hidden and
// deprecated.
type Config struct {
	DataDir      string   `hcl:"data_dir,optional" help:"directory of berth's state"`
	NetnsDir     string   `hcl:"netns_dir,optional" help:"directory where network namespaces are pinned"`
	LockDir      string   `hcl:"lock_dir,optional" help:"directory of the cross-process network locks"`
	CNIConfigDir string   `hcl:"cni_config_dir,optional" help:"directory of CNI network configurations (.conflist, .conf, .json)"`
	CNIPath      []string `hcl:"cni_path,optional" help:"colon-separated directories searched for CNI plugins"`
	CNICacheDir  string   `hcl:"cni_cache_dir,optional" help:"libcni cache directory (shared with other CNI runtimes)"`
	// PodmanSocket is a podman service's socket; empty lets berth start
	// its own under the data dir when a task needs podman.
	PodmanSocket string `hcl:"podman_socket,optional" help:"podman service socket (default: berth starts its own under the data dir when a task needs it)"`
	// PodmanAllowPrivileged lets podman tasks set privileged = true
	// (Nomad's docker allow_privileged); off, such a job is refused.
	PodmanAllowPrivileged bool `hcl:"podman_allow_privileged,optional" help:"let podman tasks run privileged containers (root on the host)"`
	// DockerEndpoint is the dockerd socket of the docker driver (Nomad's
	// docker endpoint); empty is DOCKER_HOST, then /var/run/docker.sock.
	DockerEndpoint string `hcl:"docker_endpoint,optional" help:"dockerd socket of the docker driver, unix:///path (default: DOCKER_HOST, then unix:///var/run/docker.sock)"`
	// DockerAllowPrivileged lets docker tasks set privileged = true
	// (Nomad's docker allow_privileged); off, such a job is refused.
	DockerAllowPrivileged bool `hcl:"docker_allow_privileged,optional" help:"let docker tasks run privileged containers (root on the host)"`
	// DockerPauseImage is the image of the docker driver's pause
	// containers (one per allocation in a group network).
	DockerPauseImage string `hcl:"docker_pause_image,optional" help:"image of the docker driver's pause containers (default localhost/berth-pause:latest, built by scripts/image/docker-setup.sh)"`
	LogLevel         string `hcl:"log_level,optional" help:"log level: debug, info, warn, error"`
	LogFormat        string `hcl:"log_format,optional" help:"log format: text or json"`

	// Bridge is a pointer so that a file without a bridge block keeps the
	// defaults (gohcl decodes a present block over them).
	Bridge *Bridge `hcl:"bridge,block"`
	// Client is the node's capacity and limits (a pointer for the same
	// reason as Bridge).
	Client *Client `hcl:"client,block"`
	// Tasks are the raw_exec and exec drivers' settings.
	Tasks *Tasks `hcl:"tasks,block"`
	// Artifact bounds artifact fetches (a pointer for the same reason as
	// Bridge).
	Artifact *Artifact `hcl:"artifact,block"`
}

// Tasks are the raw_exec and exec drivers' node settings: Nomad's raw_exec
// "enabled", exec's allow_caps, the client's chroot_env and its
// user.denylist and user.checked_drivers options.
type Tasks struct {
	RawExecEnabled bool `hcl:"raw_exec_enabled,optional" help:"run raw_exec tasks (unisolated); false refuses jobs that use it"`
	// UserDenylist are the users tasks of UserCheckedDrivers may not run
	// as; a user with a denied user's UID is denied too (root-like).
	UserDenylist       []string `hcl:"user_denylist,optional" help:"colon-separated users tasks of the checked drivers may not run as (a user with a denied one's UID too)"`
	UserCheckedDrivers []string `hcl:"user_checked_drivers,optional" help:"colon-separated drivers whose task users the denylist applies to (exec, raw_exec)"`
	// ChrootEnv maps host paths to paths in an exec task's root (no flag:
	// a map).
	ChrootEnv map[string]string `hcl:"chroot_env,optional" flag:"-" help:"host path = path in an exec task's root, bound read-only"`
	// AllowCaps bounds an exec task's cap_add.
	AllowCaps []string `hcl:"allow_caps,optional" help:"colon-separated capabilities an exec task's cap_add may ask for"`
	// AllowHostPIDMode and AllowHostIPCMode let exec tasks ask for
	// pid_mode/ipc_mode "host".
	AllowHostPIDMode bool `hcl:"allow_host_pid_mode,optional" help:"let exec tasks ask for pid_mode = \"host\""`
	AllowHostIPCMode bool `hcl:"allow_host_ipc_mode,optional" help:"let exec tasks ask for ipc_mode = \"host\""`
	// ExecSeccomp applies the default seccomp filter to exec tasks (no
	// namespaces, mounts, modules, BPF, ptrace...); no job can turn it
	// off, only this setting.
	ExecSeccomp bool `hcl:"exec_seccomp,optional" help:"apply the default seccomp filter to exec tasks (false turns it off)"`
}

// DefaultTasks are Nomad's defaults: raw_exec on (berth's jobs rely on it;
// Nomad's is off), root denied to exec, Nomad's chroot_env and allow_caps.
func DefaultTasks() *Tasks {
	return &Tasks{
		RawExecEnabled:     true,
		UserDenylist:       append([]string{}, execdrv.DefaultDeniedUsers...),
		UserCheckedDrivers: []string{execdrv.NameExec},
		ChrootEnv:          execdrv.DefaultChrootEnv(),
		AllowCaps:          append([]string{}, execdrv.DefaultAllowCaps...),
		ExecSeccomp:        true,
	}
}

// Bridge is the network berth generates for `network { mode = "bridge" }`
// (runner.BridgeConfig, with the names the settings have).
type Bridge struct {
	Network string `hcl:"network,optional" help:"CNI network name of network mode \"bridge\""`
	Iface   string `hcl:"iface,optional" help:"bridge interface of network mode \"bridge\""`
	Subnet  string `hcl:"subnet,optional" help:"subnet of network mode \"bridge\""`
}

// Default is the configuration with every default filled in: it works on
// a machine prepared by scripts/setup.sh.
func Default() Config {
	b := Bridge(runner.DefaultBridge())
	return Config{
		DataDir:      DefaultDataDir,
		NetnsDir:     netns.DefaultDir,
		LockDir:      attach.DefaultLockDir,
		CNIConfigDir: cni.DefaultConfDir,
		CNIPath:      cni.DefaultPluginPath(),
		CNICacheDir:  cni.DefaultCacheDir,
		LogLevel:     "info",
		LogFormat:    "text",
		Bridge:       &b,
		Tasks:        DefaultTasks(),
		Client:       defaultClient(),
		Artifact:     DefaultArtifact(),
	}
}

// RunnerBridge is the bridge settings as the runner takes them.
func (c *Config) RunnerBridge() runner.BridgeConfig {
	if c.Bridge == nil {
		return runner.DefaultBridge()
	}
	return runner.BridgeConfig(*c.Bridge)
}

// Problems collects what is wrong with a configuration, each problem
// naming its setting, so that one error reports all of them.
type Problems []string

// Add records a problem of the setting at path ("data_dir",
// "bridge.subnet"); the message names the setting as the file and the
// flag spell it.
func (p *Problems) Add(path, format string, args ...any) {
	*p = append(*p, SettingName(path)+" "+fmt.Sprintf(format, args...))
}

// Addf records a problem whose message names what it concerns itself.
func (p *Problems) Addf(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

// Err is nil without problems, else an error matching base.
func (p Problems) Err(base error) error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", base, strings.Join(p, "; "))
}

// SettingName is how messages name the setting at path: its key in the
// file and its flag, e.g. `bridge.subnet (--bridge-subnet)`.
func SettingName(path string) string {
	return path + " (--" + flagName(path) + ")"
}

// Validate checks every setting; the error (ErrInvalidConfig) lists every
// problem, each naming its setting and what to use instead.
func (c *Config) Validate() error {
	var p Problems
	c.Check(&p)
	return p.Err(ErrInvalidConfig)
}

// Check adds c's problems to p (for a program that checks settings of its
// own beside the node's). A nil Bridge gets the defaults.
func (c *Config) Check(p *Problems) {
	if c.Bridge == nil {
		c.Bridge = Default().Bridge
	}
	if c.Tasks == nil {
		c.Tasks = DefaultTasks()
	}
	c.checkArtifact(p)
	for host, inRoot := range c.Tasks.ChrootEnv {
		if !filepath.IsAbs(host) || !filepath.IsAbs(inRoot) {
			p.Add("tasks.chroot_env", "%q = %q: both paths must be absolute", host, inRoot)
		}
	}
	for _, d := range c.Tasks.UserCheckedDrivers {
		if d != execdrv.NameExec && d != execdrv.NameRawExec {
			p.Add("tasks.user_checked_drivers", "%q: only %s and %s tasks can be checked before they start", d, execdrv.NameRawExec, execdrv.NameExec)
		}
	}
	for _, s := range c.paths() {
		if !filepath.IsAbs(*s.p) {
			p.Add(s.path, "%q must be an absolute path", *s.p)
		}
	}
	if len(c.CNIPath) == 0 {
		p.Add("cni_path", "must name at least one directory")
	}
	for _, d := range c.CNIPath {
		if !filepath.IsAbs(d) {
			p.Add("cni_path", "entry %q must be an absolute path", d)
		}
	}
	if c.PodmanSocket != "" && !filepath.IsAbs(c.PodmanSocket) {
		p.Add("podman_socket", "%q must be an absolute path (or empty: berth starts its own service)", c.PodmanSocket)
	}
	if e := c.DockerEndpoint; e != "" && !strings.HasPrefix(e, "unix:///") && !filepath.IsAbs(e) {
		p.Add("docker_endpoint", "%q: berth talks to this node's dockerd over its unix socket: use unix:///path", e)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		p.Add("log_level", "%q: use debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		p.Add("log_format", "%q: use text or json", c.LogFormat)
	}
	if _, err := c.RunnerBridge().ConfList(); err != nil {
		p.Addf("%v", err)
	}
	c.checkClient(p)
}

type pathSetting struct {
	path string
	p    *string
}

// paths are the settings that name one file or directory (cni_path, a
// list, and podman_socket, which may be empty, are checked apart).
func (c *Config) paths() []pathSetting {
	return []pathSetting{
		{"data_dir", &c.DataDir}, {"netns_dir", &c.NetnsDir}, {"lock_dir", &c.LockDir},
		{"cni_config_dir", &c.CNIConfigDir}, {"cni_cache_dir", &c.CNICacheDir},
	}
}

// Abs makes relative paths absolute against the working directory, as a
// command line means them (a file's relative path is an error instead:
// relative to what would be a guess).
func (c *Config) Abs() error {
	abs := func(p *string) error {
		if *p == "" || filepath.IsAbs(*p) {
			return nil
		}
		a, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("make %s absolute: %w", *p, err)
		}
		*p = a
		return nil
	}
	ps := []*string{&c.PodmanSocket}
	for _, s := range c.paths() {
		ps = append(ps, s.p)
	}
	c.CNIPath = append([]string(nil), c.CNIPath...)
	for i := range c.CNIPath {
		ps = append(ps, &c.CNIPath[i])
	}
	for _, p := range ps {
		if err := abs(p); err != nil {
			return err
		}
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	err := lvl.UnmarshalText([]byte(s))
	return lvl, err
}

// NewLogger builds the logger log_level and log_format ask for, writing
// to w.
func (c *Config) NewLogger(w io.Writer) (*slog.Logger, error) {
	lvl, err := parseLevel(c.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: use debug, info, warn or error", ErrInvalidConfig, SettingName("log_level"), c.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch c.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: %s %q: use text or json", ErrInvalidConfig, SettingName("log_format"), c.LogFormat)
}

// AllocDir holds one directory per allocation with its task logs.
func (c *Config) AllocDir() string { return filepath.Join(c.DataDir, "alloc") }
