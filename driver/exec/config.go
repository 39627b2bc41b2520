package exec

import (
	"errors"
	"fmt"
	"github.com/berth/berth/internal/helperbin"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/berth/berth/driver"
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

var knownKeys = []string{"args", "cap_add", "cap_drop", "command", "cwd", "denied_envvars", "ipc_mode", "oom_score_adj", "pid_mode", "work_dir"}

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
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, &ConfigError{Driver: driverName, Field: field, Msg: fmt.Sprintf(format, a...)})
	}

	var unknown []string
	for k := range cfg {
		if !slices.Contains(knownKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		errs = append(errs, &ConfigError{Driver: driverName, Key: unknown[0],
			Msg: fmt.Sprintf("has unknown keys: %s (known: %s)", strings.Join(unknown, ", "), strings.Join(knownKeys, ", "))})
	}

	switch v := cfg["command"].(type) {
	case nil:
		bad("command", "is required")
	case string:
		if strings.TrimSpace(v) == "" {
			bad("command", "is required")
		}
		tc.Command = v
	default:
		bad("command", "must be a string, got %T", v)
	}

	tc.Args = strList(cfg, "args", bad)
	tc.CapAdd = caps(strList(cfg, "cap_add", bad), "cap_add", bad)
	tc.CapDrop = caps(strList(cfg, "cap_drop", bad), "cap_drop", bad)
	tc.DeniedEnvvars = strList(cfg, "denied_envvars", bad)

	if _, ok := cfg["cwd"]; ok {
		warns = append(warns, &driver.ConfigWarning{Driver: driverName, Field: "cwd",
			Msg: "is berth's old name for work_dir, which is Nomad's: rename it"})
	}
	for _, key := range []string{"work_dir", "cwd"} {
		switch v := cfg[key].(type) {
		case nil:
		case string:
			if tc.WorkDir != "" && v != tc.WorkDir {
				bad(key, "conflicts with work_dir (%q vs %q): set only one", v, tc.WorkDir)
				continue
			}
			tc.WorkDir = v
		default:
			bad(key, "must be a string, got %T", v)
		}
	}
	for key, dst := range map[string]*string{"pid_mode": &tc.PIDMode, "ipc_mode": &tc.IPCMode} {
		switch v := cfg[key].(type) {
		case nil:
		case string:
			if v != "" && v != "private" && v != "host" {
				bad(key, "must be \"private\" or \"host\", got %q", v)
				continue
			}
			*dst = v
		default:
			bad(key, "must be a string, got %T", v)
		}
	}
	switch v := cfg["oom_score_adj"].(type) {
	case nil:
	case int64:
		if v < 0 || v > 1000 {
			bad("oom_score_adj", "must be from 0 to 1000, got %d", v)
		}
		tc.OOMScoreAdj = int(v)
	case int:
		if v < 0 || v > 1000 {
			bad("oom_score_adj", "must be from 0 to 1000, got %d", v)
		}
		tc.OOMScoreAdj = v
	default:
		bad("oom_score_adj", "must be a whole number, got %T", v)
	}
	return tc, warns, errors.Join(errs...)
}

func strList(cfg map[string]any, key string, bad func(field, format string, a ...any)) []string {
	var out []string
	switch v := cfg[key].(type) {
	case nil:
	case []string:
		out = append([]string(nil), v...)
	case []any:
		for i, a := range v {
			// Numbers and bools become strings, as in Nomad.
			s, ok := driver.ConfigString(a)
			if !ok {
				bad(fmt.Sprintf("%s[%d]", key, i), "must be a string, got %T", a)
				continue
			}
			out = append(out, s)
		}
	default:
		bad(key, "must be a list of strings, got %T", v)
	}
	return out
}

func caps(l []string, key string, bad func(field, format string, a ...any)) []string {
	out := make([]string, 0, len(l))
	for i, c := range l {
		n := strings.TrimPrefix(strings.ToLower(c), "cap_")
		if _, ok := capabilities[n]; !ok {
			bad(fmt.Sprintf("%s[%d]", key, i), "%q is not a Linux capability", c)
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
