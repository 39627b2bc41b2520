package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/berth/berth/api"
	"github.com/berth/berth/attach"
	"github.com/berth/berth/cni"
	execdrv "github.com/berth/berth/driver/exec"
	"github.com/berth/berth/netns"
	"github.com/berth/berth/runner"
	"github.com/berth/berth/store"
)

// ErrInvalidConfig is matched (errors.Is) by every configuration error.
var ErrInvalidConfig = errors.New("invalid agent configuration")

// GC modes.
const (
	// GCFull reconciles berth's records and sweeps the host for leftovers
	// of berth's networks that no record explains. Right when this agent
	// is the only berth on the host.
	GCFull = "full"
	// GCRecords only drives berth's own records to a clean state (tasks
	// of a dead agent, half-made or pending teardowns). For hosts where
	// other berth data dirs are in use (tests, a second agent).
	GCRecords = "records"
)

// Config is the agent's configuration, as read from its HCL file. Every
// setting has a default that works on a machine prepared by
// scripts/setup.sh; durations are Go duration strings ("5m").
type Config struct {
	DataDir      string   `hcl:"data_dir,optional"`
	NetnsDir     string   `hcl:"netns_dir,optional"`
	LockDir      string   `hcl:"lock_dir,optional"`
	CNIConfigDir string   `hcl:"cni_config_dir,optional"`
	CNIPath      []string `hcl:"cni_path,optional"`
	CNICacheDir  string   `hcl:"cni_cache_dir,optional"`
	PodmanSocket string   `hcl:"podman_socket,optional"`
	// GCInterval is how often garbage collection runs; "0" disables the
	// periodic run (the reconcile at start always runs).
	GCInterval string `hcl:"gc_interval,optional"`
	// GCMode is GCFull or GCRecords.
	GCMode string `hcl:"gc_mode,optional"`
	// Retention is how many finished allocations (records and log
	// directories) are kept per job.
	Retention int `hcl:"retention,optional"`
	// StopTimeout bounds how long a job stop request waits for the job's
	// tasks and networks to be gone before answering 202.
	StopTimeout string `hcl:"stop_timeout,optional"`
	LogLevel    string `hcl:"log_level,optional"`
	LogFormat   string `hcl:"log_format,optional"`

	Bridge *BridgeConfig `hcl:"bridge,block"`
	API    *APIConfig    `hcl:"api,block"`
	Tasks  *TasksConfig  `hcl:"tasks,block"`
}

// TasksConfig are the raw_exec and exec drivers' node settings: Nomad's
// raw_exec "enabled", exec's allow_caps, the client's chroot_env and its
// user.denylist and user.checked_drivers options.
type TasksConfig struct {
	RawExecEnabled bool `hcl:"raw_exec_enabled,optional"`
	// UserDenylist are the users tasks of UserCheckedDrivers may not run
	// as; a user with a denied user's UID is denied too (root-like).
	UserDenylist       []string `hcl:"user_denylist,optional"`
	UserCheckedDrivers []string `hcl:"user_checked_drivers,optional"`
	// ChrootEnv maps host paths to paths in an exec task's root.
	ChrootEnv map[string]string `hcl:"chroot_env,optional"`
	// AllowCaps bounds an exec task's cap_add.
	AllowCaps []string `hcl:"allow_caps,optional"`
	// AllowHostPIDMode and AllowHostIPCMode let exec tasks ask for
	// pid_mode/ipc_mode "host".
	AllowHostPIDMode bool `hcl:"allow_host_pid_mode,optional"`
	AllowHostIPCMode bool `hcl:"allow_host_ipc_mode,optional"`
}

// driverOptions is the runner's view of the tasks block.
func (t *TasksConfig) driverOptions(o runner.StandardOptions) runner.StandardOptions {
	o.Tasks.ChrootEnv = t.ChrootEnv
	o.Tasks.AllowCaps = t.AllowCaps
	o.Tasks.AllowHostPIDMode = t.AllowHostPIDMode
	o.Tasks.AllowHostIPCMode = t.AllowHostIPCMode
	o.Tasks.DeniedUsers = append([]string{}, t.UserDenylist...)
	o.UserCheckedDrivers = append([]string{}, t.UserCheckedDrivers...)
	o.DisableRawExec = !t.RawExecEnabled
	return o
}

// BridgeConfig is the network of `network { mode = "bridge" }`.
type BridgeConfig struct {
	Network string `hcl:"network,optional"`
	Iface   string `hcl:"iface,optional"`
	Subnet  string `hcl:"subnet,optional"`
}

// APIConfig says where the HTTP API listens.
type APIConfig struct {
	// Socket is the unix socket (mode 0600).
	Socket string `hcl:"socket,optional"`
	// TCPAddress, when set, also serves the API on TCP; every request
	// there needs the bearer token.
	TCPAddress string `hcl:"tcp_address,optional"`
	Token      string `hcl:"token,optional"`
	// TokenFile holds the token (surrounding white space is ignored);
	// it wins over Token.
	TokenFile string `hcl:"token_file,optional"`
}

// DefaultConfig is the configuration with every default filled in.
func DefaultConfig() Config {
	b := runner.DefaultBridge()
	return Config{
		DataDir:      "/var/lib/berth",
		NetnsDir:     netns.DefaultDir,
		LockDir:      attach.DefaultLockDir,
		CNIConfigDir: cni.DefaultConfDir,
		CNIPath:      cni.DefaultPluginPath(),
		CNICacheDir:  cni.DefaultCacheDir,
		GCInterval:   "5m",
		GCMode:       GCFull,
		Retention:    store.DefaultRetention,
		StopTimeout:  "2m",
		LogLevel:     "info",
		LogFormat:    "text",
		Bridge:       &BridgeConfig{Network: b.Network, Iface: b.Bridge, Subnet: b.Subnet},
		API:          &APIConfig{Socket: api.DefaultSocket},
		Tasks: &TasksConfig{
			RawExecEnabled:     true,
			UserDenylist:       append([]string{}, execdrv.DefaultDeniedUsers...),
			UserCheckedDrivers: []string{execdrv.NameExec},
			ChrootEnv:          execdrv.DefaultChrootEnv(),
			AllowCaps:          append([]string{}, execdrv.DefaultAllowCaps...),
		},
	}
}

// LoadConfig reads an HCL configuration file over the defaults. Unknown
// settings and wrong types are errors naming file:line:col.
func LoadConfig(path string) (Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%w: read %s: %w", ErrInvalidConfig, path, err)
	}
	return ParseConfig(src, path)
}

// ParseConfig is LoadConfig on text; filename is used in positions.
func ParseConfig(src []byte, filename string) (Config, error) {
	cfg := DefaultConfig()
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if !diags.HasErrors() {
		// Blocks are pointers to the defaults: gohcl decodes a block that
		// is present over them and leaves absent ones (and absent
		// attributes) as they are.
		diags = append(diags, gohcl.DecodeBody(f.Body, nil, &cfg)...)
	}
	if diags.HasErrors() {
		return Config{}, fmt.Errorf("%w: %s", ErrInvalidConfig, diagString(diags))
	}
	return cfg, nil
}

func diagString(diags hcl.Diagnostics) string {
	var lines []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Detail != "" {
			s += "; " + strings.Join(strings.Fields(d.Detail), " ")
		}
		if d.Subject != nil {
			s = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, s)
		}
		lines = append(lines, s)
	}
	return strings.Join(lines, "\n")
}

// settings is the configuration checked and converted.
type settings struct {
	gcInterval  time.Duration
	stopTimeout time.Duration
	token       string
	logLevel    slog.Level
}

// check validates cfg and resolves what needs resolving (the token file).
func (cfg *Config) check() (*settings, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	s := &settings{}
	if cfg.Bridge == nil {
		cfg.Bridge = DefaultConfig().Bridge
	}
	if cfg.API == nil {
		cfg.API = DefaultConfig().API
	}
	if cfg.Tasks == nil {
		cfg.Tasks = DefaultConfig().Tasks
	}
	for host, inRoot := range cfg.Tasks.ChrootEnv {
		if !filepath.IsAbs(host) || !filepath.IsAbs(inRoot) {
			bad("tasks.chroot_env %q = %q: both paths must be absolute", host, inRoot)
		}
	}
	for name, p := range map[string]string{
		"data_dir": cfg.DataDir, "netns_dir": cfg.NetnsDir, "lock_dir": cfg.LockDir,
		"cni_config_dir": cfg.CNIConfigDir, "cni_cache_dir": cfg.CNICacheDir, "api.socket": cfg.API.Socket,
	} {
		if !filepath.IsAbs(p) {
			bad("%s %q must be an absolute path", name, p)
		}
	}
	if len(cfg.CNIPath) == 0 {
		bad("cni_path must name at least one directory")
	}
	for _, p := range cfg.CNIPath {
		if !filepath.IsAbs(p) {
			bad("cni_path entry %q must be an absolute path", p)
		}
	}
	if cfg.PodmanSocket != "" && !filepath.IsAbs(cfg.PodmanSocket) {
		bad("podman_socket %q must be an absolute path", cfg.PodmanSocket)
	}
	// sun_path is 108 bytes with its NUL.
	if len(cfg.API.Socket) > 107 {
		bad("api.socket %q is longer than a unix socket path may be (107 bytes)", cfg.API.Socket)
	}
	var err error
	if s.gcInterval, err = time.ParseDuration(cfg.GCInterval); err != nil || s.gcInterval < 0 {
		bad("gc_interval %q: use a duration such as \"5m\", or \"0\" to disable periodic gc", cfg.GCInterval)
	}
	if s.stopTimeout, err = time.ParseDuration(cfg.StopTimeout); err != nil || s.stopTimeout <= 0 {
		bad("stop_timeout %q: use a positive duration such as \"2m\"", cfg.StopTimeout)
	}
	if cfg.GCMode != GCFull && cfg.GCMode != GCRecords {
		bad("gc_mode %q: use %q or %q", cfg.GCMode, GCFull, GCRecords)
	}
	if cfg.Retention < 1 {
		bad("retention %d: keep at least 1 finished allocation per job", cfg.Retention)
	}
	if err := s.logLevel.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		bad("log_level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		bad("log_format %q: use text or json", cfg.LogFormat)
	}
	b := runner.BridgeConfig{Network: cfg.Bridge.Network, Bridge: cfg.Bridge.Iface, Subnet: cfg.Bridge.Subnet}
	if _, err := b.ConfList(); err != nil {
		bad("bridge: %v", err)
	}
	if cfg.API.TCPAddress != "" {
		if _, _, err := net.SplitHostPort(cfg.API.TCPAddress); err != nil {
			bad("api.tcp_address %q: use host:port, e.g. 127.0.0.1:4646", cfg.API.TCPAddress)
		}
		s.token = cfg.API.Token
		tokenErr := false
		if cfg.API.TokenFile != "" {
			b, err := os.ReadFile(cfg.API.TokenFile)
			if err != nil {
				bad("api.token_file: %v", err)
				tokenErr = true
			}
			s.token = strings.TrimSpace(string(b))
		}
		switch {
		case tokenErr:
		case s.token == "":
			bad("api.tcp_address is set but no token is: set api.token or api.token_file (the TCP API is refused without one)")
		case len(s.token) < 16:
			bad("api token is %d characters long; use at least 16 (e.g. `head -c 24 /dev/urandom | base64`)", len(s.token))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(errs, "; "))
	}
	return s, nil
}

// summary is the configuration without secrets, for /v1/agent/self.
func (cfg *Config) summary(tcpAddr string) api.ConfigSummary {
	return api.ConfigSummary{
		DataDir: cfg.DataDir, NetnsDir: cfg.NetnsDir, LockDir: cfg.LockDir,
		CNIConfigDir: cfg.CNIConfigDir, CNIPath: cfg.CNIPath, CNICacheDir: cfg.CNICacheDir,
		PodmanSocket:  cfg.PodmanSocket,
		BridgeNetwork: cfg.Bridge.Network, BridgeIface: cfg.Bridge.Iface, BridgeSubnet: cfg.Bridge.Subnet,
		Socket: cfg.API.Socket, TCPAddress: tcpAddr, TokenSet: tcpAddr != "",
		GCInterval: cfg.GCInterval, GCMode: cfg.GCMode, Retention: cfg.Retention, StopTimeout: cfg.StopTimeout,
		LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat,
	}
}
