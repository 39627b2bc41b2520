package jobspec

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// ErrDispatch is matched (errors.Is) by every refusal of Dispatch.
var ErrDispatch = errors.New("invalid dispatch")

// MaxPayloadSize is Nomad's limit on a dispatch payload (16 KiB).
const MaxPayloadSize = 16 * 1024

// DispatchIDSeparator joins a parent job's ID and the dispatch suffix.
const DispatchIDSeparator = "/dispatch-"

type dispatchError struct{ msg string }

func (e *dispatchError) Error() string        { return e.msg }
func (e *dispatchError) Is(target error) bool { return target == ErrDispatch }

func dispatchErrorf(format string, a ...any) error {
	return &dispatchError{msg: fmt.Sprintf(format, a...)}
}

// CheckDispatch validates meta and payload against the job's
// parameterized block, as Nomad's dispatch endpoint does: the job must be
// parameterized, every meta_required key given, no key outside
// meta_required and meta_optional, and the payload required, optional or
// forbidden as the block says and at most MaxPayloadSize bytes.
func (j *Job) CheckDispatch(meta map[string]string, payload []byte) error {
	if !j.IsParameterized() {
		return dispatchErrorf("job %q is not a parameterized job: only a job with a parameterized block can be dispatched", j.ID)
	}
	pj := j.Parameterized
	switch {
	case len(payload) > MaxPayloadSize:
		return dispatchErrorf("payload of job %q is %d bytes, more than the maximum of %d", j.ID, len(payload), MaxPayloadSize)
	case pj.Payload == PayloadForbidden && len(payload) > 0:
		return dispatchErrorf("job %q forbids a payload (parameterized payload = %q)", j.ID, PayloadForbidden)
	case pj.Payload == PayloadRequired && len(payload) == 0:
		return dispatchErrorf("job %q requires a payload (parameterized payload = %q): pass a file or - for standard input", j.ID, PayloadRequired)
	}
	var missing, extra []string
	for _, k := range pj.MetaRequired {
		if _, ok := meta[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range meta {
		if !slices.Contains(pj.MetaRequired, k) && !slices.Contains(pj.MetaOptional, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		return dispatchErrorf("dispatch of job %q did not provide required meta keys: %s", j.ID, strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		allowed := append(slices.Clone(pj.MetaRequired), pj.MetaOptional...)
		sort.Strings(allowed)
		return dispatchErrorf("dispatch of job %q included unpermitted meta keys: %s (allowed: %s)", j.ID, strings.Join(extra, ", "), strings.Join(allowed, ", "))
	}
	return nil
}

// DispatchID is Nomad's ID for a dispatched child:
// "<parent>/dispatch-<unix seconds>-<8 hex digits>". random supplies the
// hex digits (crypto/rand when nil).
func DispatchID(parent string, now time.Time, random io.Reader) (string, error) {
	if random == nil {
		random = rand.Reader
	}
	var b [4]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return "", fmt.Errorf("dispatch ID for job %q: %w", parent, err)
	}
	return fmt.Sprintf("%s%s%d-%s", parent, DispatchIDSeparator, now.Unix(), hex.EncodeToString(b[:])), nil
}

// Dispatch checks meta and payload (CheckDispatch) and returns the child
// job that runs them: a deep copy with its own ID (DispatchID), ParentID
// set, Dispatched true, no periodic block, the job's meta merged with meta
// (meta wins), so every task sees NOMAD_META_<key>, and the payload kept
// for the tasks' dispatch_payload files. The parent is not changed.
func (j *Job) Dispatch(meta map[string]string, payload []byte, now time.Time, random io.Reader) (*Job, error) {
	if err := j.CheckDispatch(meta, payload); err != nil {
		return nil, err
	}
	id, err := DispatchID(j.ID, now, random)
	if err != nil {
		return nil, err
	}
	child, err := j.Copy()
	if err != nil {
		return nil, err
	}
	child.ID, child.Name = id, id
	child.ParentID = j.ID
	child.Dispatched = true
	child.Periodic = nil
	child.Meta = maps.Clone(j.Meta)
	if child.Meta == nil && len(meta) > 0 {
		child.Meta = map[string]string{}
	}
	maps.Copy(child.Meta, meta)
	if len(payload) > 0 {
		child.Payload = slices.Clone(payload)
	}
	return child, nil
}

// PayloadPath is where a dispatched task's payload goes, relative to the
// task directory ("local/<file>"), or "" when the task has no
// dispatch_payload block.
func (t *Task) PayloadPath() string {
	if t.DispatchPayload == nil || t.DispatchPayload.File == "" {
		return ""
	}
	return filepath.Join("local", t.DispatchPayload.File)
}

// Copy returns a deep copy of the job.
func (j *Job) Copy() (*Job, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("copy job %q: %w", j.ID, err)
	}
	var c Job
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("copy job %q: %w", j.ID, err)
	}
	// JSON would turn config integers into floats: copy configs as they are.
	for gi, g := range j.Groups {
		for ti, t := range g.Tasks {
			c.Groups[gi].Tasks[ti].Config, _ = copyValue(t.Config).(map[string]any)
		}
	}
	if j.Periodic != nil {
		c.Periodic.loc = j.Periodic.loc
	}
	return &c, nil
}

func copyValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = copyValue(e)
		}
		return out
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = copyValue(e)
		}
		return out
	}
	return v
}
