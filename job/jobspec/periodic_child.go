package jobspec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PeriodicIDSeparator joins a periodic job's ID and the launch time of
// one of its children (Nomad's structs.PeriodicLaunchSuffix).
const PeriodicIDSeparator = "/periodic-"

// PeriodicChildID is Nomad's ID for the child a periodic job launches at
// launch: "<parent>/periodic-<unix seconds>".
func PeriodicChildID(parent string, launch time.Time) string {
	return parent + PeriodicIDSeparator + strconv.FormatInt(launch.Unix(), 10)
}

// ParsePeriodicChildID splits a periodic child's ID into its parent's ID
// and its launch time; ok is false for any other ID.
func ParsePeriodicChildID(id string) (parent string, launch time.Time, ok bool) {
	i := strings.LastIndex(id, PeriodicIDSeparator)
	if i <= 0 {
		return "", time.Time{}, false
	}
	digits := id[i+len(PeriodicIDSeparator):]
	if digits == "" || len(digits) > 19 || strings.TrimLeft(digits, "0123456789") != "" {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return id[:i], time.Unix(sec, 0).UTC(), true
}

// IsPeriodicChild reports whether j is a launch of a periodic job
// (PeriodicChild), not a job of its own nor a dispatch.
func (j *Job) IsPeriodicChild() bool { return j.ParentID != "" && !j.Dispatched }

// PeriodicChild returns the job one launch of the periodic job j runs, as
// Nomad's periodic dispatcher derives it: a deep copy whose ID and name are
// PeriodicChildID(j.ID, launch), ParentID j.ID, without the periodic block
// (so NOMAD_JOB_ID, NOMAD_JOB_NAME and NOMAD_ALLOC_NAME name the child and
// NOMAD_JOB_PARENT_ID the periodic job). The parent is not changed.
func (j *Job) PeriodicChild(launch time.Time) (*Job, error) {
	if j.Periodic == nil {
		return nil, fmt.Errorf("job %q is not periodic: it launches no children", j.ID)
	}
	child, err := j.Copy()
	if err != nil {
		return nil, err
	}
	id := PeriodicChildID(j.ID, launch)
	child.ID, child.Name = id, id
	child.ParentID = j.ID
	child.Periodic = nil
	return child, nil
}
