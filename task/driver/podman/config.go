package podman

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/drivercfg"
)

// ErrInvalidConfig is matched (errors.Is) by every error ValidateConfig returns.
var ErrInvalidConfig = errors.New("invalid podman task config")

// configError keeps the exact, field-naming message while still matching
// ErrInvalidConfig.
type configError struct {
	msg   string
	field string
}

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

// ConfigField names the key for jobspec's positions.
func (e *configError) ConfigField() string { return e.field }

// TaskConfig is a task's `config {}` block for the podman driver, with
// every key of Nomad's podman task driver plugin. Berth's driver acts on
// Image, Command, Args, Entrypoint, WorkingDir, Hostname and Labels today;
// the others are decoded and checked for the driver to use.
type TaskConfig struct {
	Image      string
	Command    string
	Args       []string
	Entrypoint []string
	WorkingDir string
	Hostname   string
	Labels     map[string]string

	// Networking: NetworkMode is "" (the group's namespace), "bridge",
	// "host", "none", "slirp4netns", "container:<id>", "ns:<path>" or
	// "task:<name>"; Ports are the group's port labels to publish;
	// PortMap is the older form (label -> container port).
	NetworkMode string
	Ports       []string
	PortMap     map[string]int
	DNS         []string
	ExtraHosts  []string

	Volumes        []string
	Tmpfs          []string
	Devices        []string
	CapAdd         []string
	CapDrop        []string
	SecurityOpt    []string
	SelinuxOpts    []string
	AppArmor       string
	Privileged     bool
	ReadonlyRootfs bool
	Userns         string
	Init           bool
	InitPath       string
	TTY            bool
	Sysctl         map[string]string
	// Ulimit maps a limit name to "n" or "soft:hard".
	Ulimit map[string]string

	// Sizes in bytes (shm_size, memory_reservation, memory_swap written as
	// "64m", "1g", ...); 0 when unset. MemorySwappiness is -1 when unset.
	ShmSize           int64
	MemoryReservation int64
	MemorySwap        int64
	MemorySwappiness  int
	PidsLimit         int
	CPUHardLimit      bool
	CPUCFSPeriod      int

	Logging Logging
	// Socket names one of the agent's podman sockets; "" the default.
	Socket string

	// Image pulls: berth has no registry access, so images must be present
	// locally; these are accepted for compatibility.
	Auth             Auth
	AuthSoftFail     bool
	ForcePull        bool
	ImagePullTimeout time.Duration
}

// Logging is the logging block: Driver "nomad" (the default) or
// "journald", with driver options.
type Logging struct {
	Driver  string
	Options map[string]string
}

// Auth is the registry auth block.
type Auth struct {
	Username  string
	Password  string
	TLSVerify *bool
}

// notYet is why most of Nomad's podman keys are accepted: a job written
// for Nomad validates, and the keys are checked, but the container is
// created without them.
const notYet = "not passed to podman yet"

// noPulls is why the image pull keys are accepted.
const noPulls = "berth pulls no images: they must be in local storage"

// configKeys is every key of a podman task's config block: what the
// driver does with it, how it is decoded and checked. The order is that
// of the problems reported.
var configKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("image", func(d *decoder, k string) { d.tc.Image = d.required(k) }).Note("must be in local storage: berth pulls no images"),
	drivercfg.Run("command", func(d *decoder, k string) { d.tc.Command = d.str(k) }),
	drivercfg.Run("working_dir", func(d *decoder, k string) { d.tc.WorkingDir = d.str(k) }),
	drivercfg.Run("hostname", func(d *decoder, k string) { d.tc.Hostname = d.str(k) }),
	drivercfg.Run("args", func(d *decoder, k string) { d.tc.Args = d.list(k) }),
	drivercfg.Run("entrypoint", func(d *decoder, k string) { d.tc.Entrypoint = d.entrypoint(k) }),
	drivercfg.Run("labels", func(d *decoder, k string) { d.tc.Labels = d.strMap(k) }),
	drivercfg.Accept("network_mode", notYet, func(d *decoder, k string) { d.tc.NetworkMode = d.networkMode(k) }),
	drivercfg.Accept("ports", notYet, func(d *decoder, k string) { d.tc.Ports = d.list(k) }),
	drivercfg.Accept("port_map", notYet, func(d *decoder, k string) { d.tc.PortMap = d.portMap(k) }),
	drivercfg.Accept("dns", notYet, func(d *decoder, k string) { d.tc.DNS = d.list(k) }),
	drivercfg.Accept("extra_hosts", notYet, func(d *decoder, k string) { d.tc.ExtraHosts = d.list(k, hostIP) }),
	drivercfg.Accept("volumes", notYet, func(d *decoder, k string) { d.tc.Volumes = d.list(k, volumeSpec) }),
	drivercfg.Accept("tmpfs", notYet, func(d *decoder, k string) { d.tc.Tmpfs = d.list(k, tmpfsSpec) }),
	drivercfg.Accept("devices", notYet, func(d *decoder, k string) { d.tc.Devices = d.list(k, deviceSpec) }),
	drivercfg.Accept("cap_add", notYet, func(d *decoder, k string) { d.tc.CapAdd = d.list(k) }),
	drivercfg.Accept("cap_drop", notYet, func(d *decoder, k string) { d.tc.CapDrop = d.list(k) }),
	drivercfg.Accept("security_opt", notYet, func(d *decoder, k string) { d.tc.SecurityOpt = d.list(k) }),
	drivercfg.Accept("selinux_opts", notYet, func(d *decoder, k string) { d.tc.SelinuxOpts = d.list(k) }),
	drivercfg.Accept("apparmor_profile", notYet, func(d *decoder, k string) { d.tc.AppArmor = d.str(k) }),
	drivercfg.Run("privileged", func(d *decoder, k string) { d.tc.Privileged = d.boolean(k) }).Note("only where the agent's podman_allow_privileged is set"),
	drivercfg.Accept("readonly_rootfs", notYet, func(d *decoder, k string) { d.tc.ReadonlyRootfs = d.boolean(k) }),
	drivercfg.Accept("userns", notYet, func(d *decoder, k string) { d.tc.Userns = d.str(k) }),
	drivercfg.Accept("init", notYet, func(d *decoder, k string) { d.tc.Init = d.boolean(k) }),
	drivercfg.Accept("init_path", notYet, func(d *decoder, k string) { d.tc.InitPath = d.str(k) }),
	drivercfg.Accept("tty", notYet, func(d *decoder, k string) { d.tc.TTY = d.boolean(k) }),
	drivercfg.Accept("sysctl", notYet, func(d *decoder, k string) { d.tc.Sysctl = d.strMap(k) }),
	drivercfg.Accept("ulimit", notYet, func(d *decoder, k string) { d.tc.Ulimit = d.ulimit(k) }),
	drivercfg.Accept("shm_size", notYet, func(d *decoder, k string) { d.tc.ShmSize = d.size(k) }),
	drivercfg.Accept("memory_reservation", notYet, func(d *decoder, k string) { d.tc.MemoryReservation = d.size(k) }),
	drivercfg.Accept("memory_swap", notYet, func(d *decoder, k string) { d.tc.MemorySwap = d.size(k) }),
	drivercfg.Accept("memory_swappiness", notYet, func(d *decoder, k string) { d.tc.MemorySwappiness = d.integer(k, 0, 100, -1) }),
	drivercfg.Accept("pids_limit", notYet, func(d *decoder, k string) { d.tc.PidsLimit = d.integer(k, 0, math.MaxInt32, 0) }),
	drivercfg.Accept("cpu_hard_limit", notYet, func(d *decoder, k string) { d.tc.CPUHardLimit = d.boolean(k) }),
	drivercfg.Accept("cpu_cfs_period", notYet, func(d *decoder, k string) { d.tc.CPUCFSPeriod = d.integer(k, 0, 1000000, 0) }),
	drivercfg.Accept("socket", "berth talks to the agent's own podman service", func(d *decoder, k string) { d.tc.Socket = d.str(k) }),
	drivercfg.Accept("auth_soft_fail", noPulls, func(d *decoder, k string) { d.tc.AuthSoftFail = d.boolean(k) }),
	drivercfg.Accept("force_pull", noPulls, func(d *decoder, k string) { d.tc.ForcePull = d.boolean(k) }),
	drivercfg.Accept("image_pull_timeout", noPulls, func(d *decoder, k string) { d.imagePullTimeout(k) }),
	drivercfg.Accept("logging", notYet+" (driver nomad or journald, options)", func(d *decoder, k string) { d.nested(k, loggingKeys) }),
	drivercfg.Accept("auth", noPulls+" (username, password, tls_verify)", func(d *decoder, k string) { d.nested(k, authKeys) }),
}

// loggingKeys is the logging block's.
var loggingKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("driver", func(d *decoder, k string) { d.tc.Logging.Driver = d.logDriver(k) }),
	drivercfg.Run("options", func(d *decoder, k string) { d.tc.Logging.Options = d.strMap(k) }),
}

// authKeys is the auth block's.
var authKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("username", func(d *decoder, k string) { d.tc.Auth.Username = d.str(k) }),
	drivercfg.Run("password", func(d *decoder, k string) { d.tc.Auth.Password = d.str(k) }),
	drivercfg.Run("tls_verify", func(d *decoder, k string) { d.tc.Auth.TLSVerify = d.optBoolean(k) }),
}

// ConfigKeys is the podman driver's config keys and verdicts, for the
// README's table.
func ConfigKeys() []drivercfg.Row { return configKeys.Rows() }

var (
	sizeRE   = regexp.MustCompile(`^([0-9]+)([bkmgBKMG]?)$`)
	ulimitRE = regexp.MustCompile(`^-?[0-9]+(:-?[0-9]+)?$`)
)

// Policy is what this node lets a podman task ask for beyond the
// defaults: agent settings, which no job can change.
type Policy struct {
	// AllowPrivileged lets a task set privileged = true (Nomad's docker
	// driver's allow_privileged): the container gets every capability
	// and the host's devices, which is root on the host.
	AllowPrivileged bool
}

// Check refuses what tc asks for beyond the policy, naming the field.
func (p Policy) Check(tc *TaskConfig) error {
	if tc.Privileged && !p.AllowPrivileged {
		return &configError{field: "privileged",
			msg: "podman: config.privileged is not allowed on this node: a privileged container is root on the host (agent setting podman_allow_privileged)"}
	}
	return nil
}

// ValidateConfig is ParseConfig and the policy's Check: what `berth
// validate` and the agent answer for a task's config block.
func (p Policy) ValidateConfig(cfg map[string]any) error {
	tc, warns, err := parseConfig(cfg)
	if err == nil {
		err = p.Check(tc)
	}
	if len(warns) == 0 {
		return err
	}
	return errors.Join(append(warns, err)...)
}

// decoder reads one config block (or a block nested in it) into tc and
// collects every problem.
type decoder struct {
	cfg   map[string]any
	tc    *TaskConfig
	errs  []error
	warns []error
}

// Warn implements drivercfg.Reporter.
func (d *decoder) Warn(key, why string) {
	d.warns = append(d.warns, &driver.ConfigWarning{Driver: "podman", Field: key, Msg: why})
}

// Refuse implements drivercfg.Reporter.
func (d *decoder) Refuse(key, why string) { d.bad(key, "is not supported: %s", why) }

func (d *decoder) bad(field, format string, a ...any) {
	d.errs = append(d.errs, &configError{msg: "podman: config." + field + " " + fmt.Sprintf(format, a...), field: field})
}

func (d *decoder) str(key string) string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		d.bad(key, "must be a string, got %T", v)
	}
	return s
}

func (d *decoder) boolean(key string) bool {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		d.bad(key, "must be true or false, got %T", v)
	}
	return b
}

func (d *decoder) integer(key string, lo, hi int64, def int) int {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return def
	}
	n, ok := wholeNumber(v)
	if !ok {
		d.bad(key, "must be a whole number, got %T", v)
		return def
	}
	if n < lo || n > hi {
		d.bad(key, "must be from %d to %d, got %d", lo, hi, n)
		return def
	}
	return int(n)
}

func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

// list reads a list of strings; each check returns the problem of an
// element (a format for %q of it), "" when there is none.
func (d *decoder) list(key string, checks ...func(string) string) []string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := stringList(v)
	if !ok {
		d.bad(key, "must be a list of strings, got %T", v)
	}
	for _, e := range l {
		for _, check := range checks {
			if msg := check(e); msg != "" {
				d.bad(key, msg, e)
			}
		}
	}
	return l
}

func hostIP(h string) string {
	if name, ip, ok := strings.Cut(h, ":"); !ok || name == "" || ip == "" {
		return "%q is not host:ip"
	}
	return ""
}

func volumeSpec(v string) string {
	if parts := strings.Split(v, ":"); len(parts) < 2 || parts[0] == "" || parts[1] == "" || len(parts) > 3 {
		return "%q is not source:destination[:options]"
	}
	return ""
}

func tmpfsSpec(t string) string {
	if !strings.HasPrefix(t, "/") {
		return "%q must be an absolute path (with :options)"
	}
	return ""
}

func deviceSpec(dev string) string {
	if !strings.HasPrefix(dev, "/") {
		return "%q must be host-path[:container-path[:permissions]]"
	}
	return ""
}

// required reads a string that must not be empty; a value of another
// type is reported as such only.
func (d *decoder) required(key string) string {
	s := d.str(key)
	if _, isStr := d.cfg[key].(string); (isStr || d.cfg[key] == nil) && strings.TrimSpace(s) == "" {
		d.errs = append(d.errs, &configError{msg: "podman: config." + key + " is required", field: key})
	}
	return s
}

// optBoolean is boolean, nil when the key is absent.
func (d *decoder) optBoolean(key string) *bool {
	if _, ok := d.cfg[key]; !ok {
		return nil
	}
	b := d.boolean(key)
	return &b
}

// entrypoint is a string or a list of strings.
func (d *decoder) entrypoint(key string) []string {
	switch v := d.cfg[key].(type) {
	case nil:
		return nil
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	default:
		l, ok := stringList(v)
		if !ok {
			d.bad(key, "must be a string or a list of strings, got %T", v)
		}
		return l
	}
}

func (d *decoder) networkMode(key string) string {
	switch m := d.str(key); {
	case m == "", m == "bridge", m == "host", m == "none", m == "slirp4netns":
		return m
	case strings.HasPrefix(m, "container:") && len(m) > len("container:"),
		strings.HasPrefix(m, "ns:") && len(m) > len("ns:"),
		strings.HasPrefix(m, "task:") && len(m) > len("task:"):
		return m
	default:
		d.bad(key, "%q is not a network mode: use \"bridge\", \"host\", \"none\", \"slirp4netns\", \"container:<id>\", \"ns:<path>\" or \"task:<name>\"", m)
		return m
	}
}

// ulimit maps a limit name to "n" or "soft:hard".
func (d *decoder) ulimit(key string) map[string]string {
	m := d.strMap(key)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !ulimitRE.MatchString(m[k]) {
			d.bad(key+"."+k, "%q is not \"n\" or \"soft:hard\"", m[k])
		}
	}
	return m
}

func (d *decoder) logDriver(key string) string {
	s := d.str(key)
	switch s {
	case "", "nomad", "journald":
	default:
		d.bad(key, "%q is not a log driver: use \"nomad\" or \"journald\"", s)
	}
	return s
}

// imagePullTimeout keeps the default unless the key sets one.
func (d *decoder) imagePullTimeout(key string) {
	s := d.str(key)
	if s == "" {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil || dur <= 0 {
		d.bad(key, "%q is not a positive duration such as \"5m\"", s)
		return
	}
	d.tc.ImagePullTimeout = dur
}

// nested walks the block at key with its own table, reporting its
// problems under key.
func (d *decoder) nested(key string, keys drivercfg.Table[*decoder]) {
	m := d.block(key)
	if m == nil {
		return
	}
	sub := &decoder{cfg: m, tc: d.tc}
	for _, k := range keys.Walk(sub, m) {
		sub.bad(k, "is not a key of %s (%s)", key, strings.Join(keys.Order(), ", "))
	}
	d.nest(key, sub)
}

func (d *decoder) strMap(key string) map[string]string {
	v, ok := d.cfg[key]
	if !ok || v == nil {
		return nil
	}
	m, err := stringMap(key, v)
	if err != nil {
		d.errs = append(d.errs, err)
	}
	return m
}

// block reads a nested block, written `name { ... }` (a list of one map)
// or `name = { ... }` (a map).
func (d *decoder) block(key string) map[string]any {
	switch v := d.cfg[key].(type) {
	case nil:
		return nil
	case map[string]any:
		return v
	case []any:
		if len(v) == 1 {
			if m, ok := v[0].(map[string]any); ok {
				return m
			}
		}
		d.bad(key, "must be one block, got %d", len(v))
	case []map[string]any:
		if len(v) == 1 {
			return v[0]
		}
		d.bad(key, "must be one block, got %d", len(v))
	default:
		d.bad(key, "must be a block, got %T", v)
	}
	return nil
}

func (d *decoder) size(key string) int64 {
	s := d.str(key)
	if s == "" {
		return 0
	}
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		d.bad(key, "%q is not a size such as \"64m\" or \"1g\"", s)
		return 0
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		d.bad(key, "%q is too large", s)
		return 0
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "m": 20, "g": 30}[strings.ToLower(m[2])]
	if n > math.MaxInt64>>shift {
		d.bad(key, "%q is too large", s)
		return 0
	}
	return n << shift
}

// ParseConfig decodes and checks a task's config block. Errors name the
// field, e.g. "podman: config.args must be a list of strings"; every
// problem is reported (errors.Join).
func ParseConfig(cfg map[string]any) (*TaskConfig, error) {
	tc, _, err := parseConfig(cfg)
	return tc, err
}

// parseConfig is ParseConfig with the warnings of deprecated keys.
func parseConfig(cfg map[string]any) (*TaskConfig, []error, error) {
	d := &decoder{cfg: cfg, tc: &TaskConfig{MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute}}
	if unknown := configKeys.Walk(d, cfg); len(unknown) > 0 {
		// First, as before the table: the likeliest cause of the others.
		d.errs = append([]error{&configError{field: unknown[0], msg: fmt.Sprintf("podman: unknown config key(s) %s (known: %s)",
			"config."+strings.Join(unknown, ", config."), strings.Join(configKeys.Names(), ", "))}}, d.errs...)
	}
	if err := errors.Join(d.errs...); err != nil {
		return nil, d.warns, err
	}
	return d.tc, d.warns, nil
}

// nest reports a nested block's problems under its key.
func (d *decoder) nest(key string, sub *decoder) {
	d.warns = append(d.warns, sub.warns...)
	for _, e := range sub.errs {
		ce, ok := e.(*configError)
		if !ok {
			d.errs = append(d.errs, e)
			continue
		}
		d.errs = append(d.errs, &configError{msg: strings.Replace(ce.msg, "config.", "config."+key+".", 1), field: key})
	}
}

func (d *decoder) portMap(key string) map[string]int {
	v := d.cfg[key]
	if v == nil {
		return nil
	}
	var maps []map[string]any
	switch m := v.(type) {
	case map[string]any:
		maps = []map[string]any{m}
	case []any:
		for _, e := range m {
			if mm, ok := e.(map[string]any); ok {
				maps = append(maps, mm)
			}
		}
	case []map[string]any:
		maps = m
	default:
		d.bad("port_map", "must be a map of port label to container port, got %T", v)
		return nil
	}
	out := map[string]int{}
	for _, m := range maps {
		for k, e := range m {
			n, ok := wholeNumber(e)
			if !ok || n < 1 || n > 65535 {
				d.bad("port_map."+k, "must be a port number from 1 to 65535, got %v", e)
				continue
			}
			out[k] = int(n)
		}
	}
	return out
}

func stringList(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return append([]string(nil), l...), true
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			// Numbers and bools become strings, as in Nomad.
			s, ok := driver.ConfigString(e)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func stringMap(key string, v any) (map[string]string, error) {
	switch m := v.(type) {
	case map[string]string:
		out := make(map[string]string, len(m))
		for k, s := range m {
			out[k] = s
		}
		return out, nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, e := range m {
			s, ok := e.(string)
			if !ok {
				return nil, &configError{msg: fmt.Sprintf("podman: config.%s.%s must be a string, got %T", key, k, e), field: key}
			}
			out[k] = s
		}
		return out, nil
	case []any:
		// A `labels { }` block (written once or more) decodes to a list of maps.
		out := map[string]string{}
		for _, e := range m {
			sub, err := stringMap(key, e)
			if err != nil {
				return nil, err
			}
			for k, s := range sub {
				out[k] = s
			}
		}
		return out, nil
	case []map[string]any:
		out := map[string]string{}
		for _, mm := range m {
			sub, err := stringMap(key, mm)
			if err != nil {
				return nil, err
			}
			for k, s := range sub {
				out[k] = s
			}
		}
		return out, nil
	}
	return nil, &configError{msg: fmt.Sprintf("podman: config.%s must be a map of strings, got %T", key, v), field: key}
}

// command is what the container runs: with `command`, it replaces the
// image's CMD and `args` follow it; `args` alone replace the CMD and go to
// the image's entrypoint, as in Nomad's docker driver.
func (tc *TaskConfig) command() []string {
	if tc.Command != "" {
		return append([]string{tc.Command}, tc.Args...)
	}
	if len(tc.Args) > 0 {
		return append([]string(nil), tc.Args...)
	}
	return nil
}
