package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth/berth/internal/helperbin"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/drivercfg"
)

// ErrInvalidConfig is matched (errors.Is) by every error ValidateConfig returns.
var ErrInvalidConfig = errors.New("invalid task config")

// ConfigError is one problem in a task's config block; Field is the
// offending key ("command", "args[2]"), empty for unknown keys. Driver
// prefixes the message unless empty (Start's errors name it already).
type ConfigError struct {
	Driver string
	Field  string
	Msg    string
	// Key is the config key to point at when Field is empty (the first
	// unknown key).
	Key string
}

// ConfigField names the key for jobspec's positions.
func (e *ConfigError) ConfigField() string {
	if e.Field != "" {
		return e.Field
	}
	return e.Key
}

func (e *ConfigError) Error() string {
	msg := "config." + e.Field + " " + e.Msg
	if e.Field == "" {
		msg = "config " + e.Msg
	}
	if e.Driver == "" {
		return msg
	}
	return e.Driver + ": " + msg
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// TaskConfig is the decoded config block of a raw_exec or exec task, with
// the keys Nomad's raw_exec and exec drivers document.
type TaskConfig struct {
	Command string
	Args    []string
	// WorkDir is `work_dir` (or berth's older `cwd`, deprecated); empty
	// means the working directory of berth.
	WorkDir string
	// PIDMode and IPCMode are "private" (the default, as "") or "host".
	PIDMode string
	IPCMode string
	// CapAdd and CapDrop are capability names, lower case without "cap_"
	// ("net_bind_service"), or "all".
	CapAdd  []string
	CapDrop []string
	// OOMScoreAdj is the task's oom_score_adj, 0 to 1000.
	OOMScoreAdj int
	// DeniedEnvvars are names (globs, "AWS_*") removed from the task's
	// environment.
	DeniedEnvvars []string
}

// isolatedOnly qualifies the keys only exec acts on.
const isolatedOnly = "exec only: raw_exec is unisolated, as in Nomad"

// configKeys is every key of a raw_exec or exec task's config block: what
// the drivers do with it, how it is decoded and checked. The order is that
// of the problems reported.
var configKeys = drivercfg.Table[*decoder]{
	drivercfg.Run("command", func(d *decoder, k string) { d.tc.Command = d.required(k) }),
	drivercfg.Run("args", func(d *decoder, k string) { d.tc.Args = d.strList(k) }),
	drivercfg.Run("cap_add", func(d *decoder, k string) { d.tc.CapAdd = d.caps(k) }).Note(isolatedOnly),
	drivercfg.Run("cap_drop", func(d *decoder, k string) { d.tc.CapDrop = d.caps(k) }).Note(isolatedOnly),
	drivercfg.Run("denied_envvars", func(d *decoder, k string) { d.tc.DeniedEnvvars = d.strList(k) }),
	drivercfg.Run("work_dir", func(d *decoder, k string) { d.workDir(k) }),
	drivercfg.Deprecate("cwd", "is berth's old name for work_dir, which is Nomad's: rename it", func(d *decoder, k string) { d.workDir(k) }),
	drivercfg.Run("pid_mode", func(d *decoder, k string) { d.tc.PIDMode = d.nsMode(k) }).Note(isolatedOnly),
	drivercfg.Run("ipc_mode", func(d *decoder, k string) { d.tc.IPCMode = d.nsMode(k) }).Note(isolatedOnly),
	drivercfg.Run("oom_score_adj", func(d *decoder, k string) { d.tc.OOMScoreAdj = d.oomScoreAdj(k) }),
	drivercfg.Refuse[*decoder]("cgroup_v1_override", whyCgroupOverride),
	drivercfg.Refuse[*decoder]("cgroup_v2_override", whyCgroupOverride),
}

// whyCgroupOverride is why a task cannot join a cgroup the job names
// (Nomad 1.7's keys; 1.6.5 has neither): berth ends every task by killing
// its own cgroup, which a shared one would make kill others, or miss what
// the task left there.
const whyCgroupOverride = "berth keeps each task in a cgroup of its own, so that stopping it ends every process it made (Nomad 1.7's key; Nomad 1.6.5 does not know it): remove it, and set limits with the task's resources block"

// ConfigKeys is the raw_exec and exec drivers' config keys and verdicts,
// for the README's table.
func ConfigKeys() []drivercfg.Row { return configKeys.Rows() }

// capabilities are Linux's by number, under the names Nomad takes (cap_
// prefix and case do not matter); "all" is -1.
var capabilities = map[string]int{}

func init() {
	for i, c := range strings.Fields(`chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap
		linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner sys_module
		sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice sys_resource sys_time
		sys_tty_config mknod lease audit_write audit_control setfcap mac_override mac_admin syslog
		wake_alarm block_suspend audit_read perfmon bpf checkpoint_restore`) {
		capabilities[c] = i
	}
	capabilities["all"] = -1
}

// parseConfig decodes cfg, reporting every problem found, not just the
// first. warns are things that work but should change.
func parseConfig(driverName string, cfg map[string]any) (tc TaskConfig, warns []error, err error) {
	d := &decoder{driver: driverName, cfg: cfg}
	if unknown := configKeys.Walk(d, cfg); len(unknown) > 0 {
		// First, as before the table: the likeliest cause of the others.
		d.errs = append([]error{&ConfigError{Driver: driverName, Key: unknown[0],
			Msg: fmt.Sprintf("has unknown keys: %s (known: %s)", strings.Join(unknown, ", "), strings.Join(configKeys.Names(), ", "))}}, d.errs...)
	}
	return d.tc, d.warns, errors.Join(d.errs...)
}

// decoder reads one config block into tc and collects every problem.
type decoder struct {
	driver string
	cfg    map[string]any
	tc     TaskConfig
	errs   []error
	warns  []error
}

func (d *decoder) bad(field, format string, a ...any) {
	d.errs = append(d.errs, &ConfigError{Driver: d.driver, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// Warn implements drivercfg.Reporter.
func (d *decoder) Warn(key, why string) {
	d.warns = append(d.warns, &driver.ConfigWarning{Driver: d.driver, Field: key, Msg: why})
}

// Refuse implements drivercfg.Reporter.
func (d *decoder) Refuse(key, why string) { d.bad(key, "is not supported: %s", why) }

// required reads a string that must not be blank.
func (d *decoder) required(key string) string {
	switch v := d.cfg[key].(type) {
	case nil:
		d.bad(key, "is required")
	case string:
		if strings.TrimSpace(v) == "" {
			d.bad(key, "is required")
		}
		return v
	default:
		d.bad(key, "must be a string, got %T", v)
	}
	return ""
}

// workDir reads work_dir or its old name cwd: both may be set only to the
// same directory.
func (d *decoder) workDir(key string) {
	switch v := d.cfg[key].(type) {
	case nil:
	case string:
		if d.tc.WorkDir != "" && v != d.tc.WorkDir {
			d.bad(key, "conflicts with work_dir (%q vs %q): set only one", v, d.tc.WorkDir)
			return
		}
		d.tc.WorkDir = v
	default:
		d.bad(key, "must be a string, got %T", v)
	}
}

// nsMode reads pid_mode or ipc_mode.
func (d *decoder) nsMode(key string) string {
	switch v := d.cfg[key].(type) {
	case nil:
	case string:
		if v != "" && v != "private" && v != "host" {
			d.bad(key, "must be \"private\" or \"host\", got %q", v)
			return ""
		}
		return v
	default:
		d.bad(key, "must be a string, got %T", v)
	}
	return ""
}

func (d *decoder) oomScoreAdj(key string) int {
	var n int64
	switch v := d.cfg[key].(type) {
	case nil:
		return 0
	case int64:
		n = v
	case int:
		n = int64(v)
	default:
		d.bad(key, "must be a whole number, got %T", v)
		return 0
	}
	if n < 0 || n > 1000 {
		d.bad(key, "must be from 0 to 1000, got %d", n)
	}
	return int(n)
}

func (d *decoder) strList(key string) []string {
	var out []string
	switch v := d.cfg[key].(type) {
	case nil:
	case []string:
		out = append([]string(nil), v...)
	case []any:
		for i, a := range v {
			// Numbers and bools become strings, as in Nomad.
			s, ok := driver.ConfigString(a)
			if !ok {
				d.bad(fmt.Sprintf("%s[%d]", key, i), "must be a string, got %T", a)
				continue
			}
			out = append(out, s)
		}
	default:
		d.bad(key, "must be a list of strings, got %T", v)
	}
	return out
}

// caps reads a list of capability names, lower case without "cap_".
func (d *decoder) caps(key string) []string {
	l := d.strList(key)
	out := make([]string, 0, len(l))
	for i, c := range l {
		n := strings.TrimPrefix(strings.ToLower(c), "cap_")
		if _, ok := capabilities[n]; !ok {
			d.bad(fmt.Sprintf("%s[%d]", key, i), "%q is not a Linux capability", c)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildEnv returns exactly env as KEY=value, sorted, plus a default PATH
// when env has none: the task must not inherit berth's own environment.
func buildEnv(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+defaultPath)
	}
	sort.Strings(out)
	return out
}

// lookPath resolves command the way the task would see it: against the
// task's PATH, not berth's, relative to its working directory. inRoot,
// when set, maps a path of the task's root to the host (exec); the path
// returned is the task's.
func lookPath(command, pathEnv, workDir string, inRoot func(string) string) (string, error) {
	host := func(p string) string { return p }
	if inRoot != nil {
		host = inRoot
	}
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) && workDir != "" {
			p = filepath.Join(workDir, p)
		}
		if err := helperbin.CheckExecutable(host(p)); err != nil {
			return "", fmt.Errorf("config.command %q: %w", command, err)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		// Relative PATH entries would depend on berth's working directory.
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, command)
		if helperbin.CheckExecutable(host(p)) == nil {
			return p, nil
		}
	}
	where := "task PATH"
	if inRoot != nil {
		where = "the task's root (chroot_env), task PATH"
	}
	return "", fmt.Errorf("config.command %q not found in %s %q: %w", command, where, pathEnv, os.ErrNotExist)
}
