package podman

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalidConfig is matched (errors.Is) by every error ValidateConfig returns.
var ErrInvalidConfig = errors.New("invalid podman task config")

// configError keeps the exact, field-naming message while still matching
// ErrInvalidConfig.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

func configErrorf(format string, args ...any) error {
	return &configError{msg: "podman: " + fmt.Sprintf(format, args...)}
}

// TaskConfig is a task's `config {}` block for the podman driver.
type TaskConfig struct {
	Image      string
	Command    string
	Args       []string
	Entrypoint []string
	WorkingDir string
	Hostname   string
	Labels     map[string]string
}

var knownKeys = []string{"args", "command", "entrypoint", "hostname", "image", "labels", "working_dir"}

// ParseConfig decodes and checks a task's config block. Errors name the
// field, e.g. "podman: config.args must be a list of strings".
func ParseConfig(cfg map[string]any) (*TaskConfig, error) {
	var unknown []string
	for k := range cfg {
		if !contains(knownKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, configErrorf("unknown config key(s) %s (known: %s)",
			"config."+strings.Join(unknown, ", config."), strings.Join(knownKeys, ", "))
	}

	tc := &TaskConfig{}
	var err error
	if tc.Image, err = optString(cfg, "image"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(tc.Image) == "" {
		return nil, configErrorf("config.image is required")
	}
	if tc.Command, err = optString(cfg, "command"); err != nil {
		return nil, err
	}
	if tc.WorkingDir, err = optString(cfg, "working_dir"); err != nil {
		return nil, err
	}
	if tc.Hostname, err = optString(cfg, "hostname"); err != nil {
		return nil, err
	}
	if v, ok := cfg["args"]; ok && v != nil {
		if tc.Args, ok = stringList(v); !ok {
			return nil, configErrorf("config.args must be a list of strings, got %T", v)
		}
	}
	if v, ok := cfg["entrypoint"]; ok && v != nil {
		if s, isStr := v.(string); isStr {
			if s != "" {
				tc.Entrypoint = []string{s}
			}
		} else if tc.Entrypoint, ok = stringList(v); !ok {
			return nil, configErrorf("config.entrypoint must be a string or a list of strings, got %T", v)
		}
	}
	if v, ok := cfg["labels"]; ok && v != nil {
		if tc.Labels, err = stringMap(v); err != nil {
			return nil, err
		}
	}
	return tc, nil
}

func optString(cfg map[string]any, key string) (string, error) {
	v, ok := cfg[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", configErrorf("config.%s must be a string, got %T", key, v)
	}
	return s, nil
}

func stringList(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return append([]string(nil), l...), true
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

func stringMap(v any) (map[string]string, error) {
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
				return nil, configErrorf("config.labels.%s must be a string, got %T", k, e)
			}
			out[k] = s
		}
		return out, nil
	case []map[string]any:
		// HCL decodes a repeated `labels { }` block into a list of maps.
		out := map[string]string{}
		for _, mm := range m {
			sub, err := stringMap(mm)
			if err != nil {
				return nil, err
			}
			for k, s := range sub {
				out[k] = s
			}
		}
		return out, nil
	}
	return nil, configErrorf("config.labels must be a map of strings, got %T", v)
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
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
