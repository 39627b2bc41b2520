package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/berth/berth/internal/cgroup"
)

// The spec and the status are written as lines of "key value", the value
// quoted as a Go string: readable with cat, decoded with strconv alone, so
// that the supervisor links no encoding package. A key may repeat (a list).

type writer struct{ b bytes.Buffer }

func (w *writer) str(k, v string) {
	w.b.WriteString(k)
	w.b.WriteByte(' ')
	w.b.WriteString(strconv.Quote(v))
	w.b.WriteByte('\n')
}

func (w *writer) num(k string, v int64) { w.str(k, strconv.FormatInt(v, 10)) }
func (w *writer) unum(k string, v uint64) {
	w.str(k, strconv.FormatUint(v, 10))
}

func (w *writer) flag(k string, v bool) {
	if v {
		w.str(k, "true")
	}
}

// cgroup writes the task's cgroup; nil (none) writes nothing.
func (w *writer) cgroup(c *cgroup.Set) {
	if c == nil {
		return
	}
	w.str("cgroup_rel", c.Rel)
	w.str("cgroup_unified", c.Unified)
	for _, d := range c.V1 {
		w.str("cgroup_v1", d)
	}
}

// identity writes a task's identity.
func (w *writer) identity(id *Credentials) {
	if id.SetUser {
		w.num("uid", int64(id.UID))
		w.num("gid", int64(id.GID))
		for _, g := range id.Groups {
			w.num("group", int64(g))
		}
	}
	if id.SetCaps {
		w.flag("setcaps", true)
		for _, c := range id.Caps {
			w.num("cap", int64(c))
		}
	}
	w.flag("seccomp", id.Seccomp)
}

type field struct{ key, val string }

// parse reads a record; unknown keys are the caller's business.
func parse(b []byte) ([]field, error) {
	var out []field
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		k, q, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("line %d: no value", n)
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", n, k, err)
		}
		out = append(out, field{k, v})
	}
	return out, sc.Err()
}

// reader decodes fields into typed values, keeping the first error.
type reader struct{ err error }

func (r *reader) int(f field) int {
	v, err := strconv.Atoi(f.val)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", f.key, err)
	}
	return v
}

func (r *reader) int64(f field) int64 {
	v, err := strconv.ParseInt(f.val, 10, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", f.key, err)
	}
	return v
}

func (r *reader) uint64(f field) uint64 {
	v, err := strconv.ParseUint(f.val, 10, 64)
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", f.key, err)
	}
	return v
}

// cgroup decodes f into *c when f is one of the cgroup's keys, and says
// whether it was.
func (r *reader) cgroup(c **cgroup.Set, f field) bool {
	switch f.key {
	case "cgroup_rel", "cgroup_unified", "cgroup_v1":
	default:
		return false
	}
	if *c == nil {
		*c = &cgroup.Set{}
	}
	switch f.key {
	case "cgroup_rel":
		(*c).Rel = f.val
	case "cgroup_unified":
		(*c).Unified = f.val
	default:
		(*c).V1 = append((*c).V1, f.val)
	}
	return true
}

// identity decodes f into id when f is one of the identity's keys, and
// says whether it was.
func (r *reader) identity(id *Credentials, f field) bool {
	switch f.key {
	case "uid":
		id.SetUser, id.UID = true, r.int(f)
	case "gid":
		id.GID = r.int(f)
	case "group":
		id.Groups = append(id.Groups, r.int(f))
	case "setcaps":
		id.SetCaps = true
	case "cap":
		id.Caps = append(id.Caps, r.int(f))
	case "seccomp":
		id.Seccomp = true
	default:
		return false
	}
	return true
}
