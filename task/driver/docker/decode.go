package docker

// The config block's decoder: the same reading and checks as the podman
// driver's (task/driver/podman/config.go), in this driver's words.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/drivercfg"
)

// ErrInvalidConfig is matched (errors.Is) by every error ValidateConfig returns.
var ErrInvalidConfig = errors.New("invalid docker task config")

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

// decoder reads one config block (or a block nested in it) into tc and
// collects every problem.
type decoder struct {
	cfg   map[string]any
	tc    *TaskConfig
	errs  []error
	warns []error
	// refused is what berth cannot give: warnings at validate, errors at
	// start.
	refused []error
}

// Warn implements drivercfg.Reporter.
func (d *decoder) Warn(key, why string) {
	d.warns = append(d.warns, &driver.ConfigWarning{Driver: Name, Field: key, Msg: why})
}

// Refuse implements drivercfg.Reporter.
func (d *decoder) Refuse(key, why string) { d.refuse(key, "is not supported: %s", why) }

// refuse records what berth will not run, naming key.
func (d *decoder) refuse(key, format string, a ...any) {
	d.refused = append(d.refused, &configError{msg: "docker: config." + key + " " + fmt.Sprintf(format, a...), field: key})
}

func (d *decoder) bad(field, format string, a ...any) {
	d.errs = append(d.errs, &configError{msg: "docker: config." + field + " " + fmt.Sprintf(format, a...), field: field})
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

func ipAddr(s string) string {
	if net.ParseIP(s) == nil {
		return "%q is not an IP address"
	}
	return ""
}

// securityOpt checks one security_opt entry (docker run --security-opt).
func securityOpt(o string) string {
	name, val, hasVal := strings.Cut(o, "=")
	switch name {
	case "no-new-privileges":
		if !hasVal || val == "true" || val == "false" {
			return ""
		}
	case "seccomp", "apparmor", "label", "mask", "unmask":
		if val != "" {
			return ""
		}
	}
	return "%q is not a security option: use no-new-privileges, seccomp=<profile|unconfined>, apparmor=<profile|unconfined>, label=<disable|type:...>, mask=<paths>, unmask=<paths>"
}

func tmpfsSpec(t string) string {
	if !strings.HasPrefix(t, "/") {
		return "%q must be an absolute path (with :options)"
	}
	return ""
}

// required reads a string that must not be empty; a value of another
// type is reported as such only.
func (d *decoder) required(key string) string {
	s := d.str(key)
	if _, isStr := d.cfg[key].(string); (isStr || d.cfg[key] == nil) && strings.TrimSpace(s) == "" {
		d.errs = append(d.errs, &configError{msg: "docker: config." + key + " is required", field: key})
	}
	return s
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

// caps reads capability names as podman takes them, upper case with
// CAP_, and keeps them lower case without it (Nomad's allow_caps form).
func (d *decoder) caps(key string) []string {
	l := d.list(key)
	out := make([]string, 0, len(l))
	for _, c := range l {
		n := strings.TrimPrefix(strings.ToLower(c), "cap_")
		if !capNameRE.MatchString(n) {
			d.bad(key, "%q is not a capability name such as \"NET_ADMIN\"", c)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var capNameRE = regexp.MustCompile(`^(all|[a-z_]+)$`)

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

// nest reports a nested block's problems under its key.
func (d *decoder) nest(key string, sub *decoder) {
	d.warns = append(d.warns, sub.warns...)
	under := func(errs []error) []error {
		out := make([]error, 0, len(errs))
		for _, e := range errs {
			ce, ok := e.(*configError)
			if !ok {
				out = append(out, e)
				continue
			}
			out = append(out, &configError{msg: strings.Replace(ce.msg, "config.", "config."+key+".", 1), field: key})
		}
		return out
	}
	d.errs = append(d.errs, under(sub.errs)...)
	d.refused = append(d.refused, under(sub.refused)...)
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
				return nil, &configError{msg: fmt.Sprintf("docker: config.%s.%s must be a string, got %T", key, k, e), field: key}
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
	return nil, &configError{msg: fmt.Sprintf("docker: config.%s must be a map of strings, got %T", key, v), field: key}
}
