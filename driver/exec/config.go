package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
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

// TaskConfig is the decoded config block of a raw_exec or exec task.
type TaskConfig struct {
	Command string
	Args    []string
	// WorkDir is `work_dir` (or its alias `cwd`); empty means the working
	// directory of berth.
	WorkDir string
}

var knownKeys = map[string]bool{"command": true, "args": true, "work_dir": true, "cwd": true}

// parseConfig decodes cfg, reporting every problem found, not just the first.
func parseConfig(driverName string, cfg map[string]any) (TaskConfig, error) {
	var (
		tc   TaskConfig
		errs []error
	)
	bad := func(field, format string, a ...any) {
		errs = append(errs, &ConfigError{Driver: driverName, Field: field, Msg: fmt.Sprintf(format, a...)})
	}

	var unknown []string
	for k := range cfg {
		if !knownKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		bad("", "has unknown keys: %s (known: args, command, cwd, work_dir)", strings.Join(unknown, ", "))
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

	switch v := cfg["args"].(type) {
	case nil:
	case []string:
		tc.Args = append([]string(nil), v...)
	case []any:
		for i, a := range v {
			s, ok := a.(string)
			if !ok {
				bad(fmt.Sprintf("args[%d]", i), "must be a string, got %T", a)
				continue
			}
			tc.Args = append(tc.Args, s)
		}
	default:
		bad("args", "must be a list of strings, got %T", v)
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
	return tc, errors.Join(errs...)
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
// task's PATH, not berth's.
func lookPath(command, pathEnv, workDir string) (string, error) {
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) && workDir != "" {
			p = filepath.Join(workDir, p)
		}
		if err := checkExecutable(p); err != nil {
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
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("config.command %q not found in task PATH %q: %w", command, pathEnv, os.ErrNotExist)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable: %w", p, os.ErrPermission)
	}
	return nil
}
