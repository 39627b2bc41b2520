package exec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/berth/berth/driver"
)

// errNoMemoryController: the task has a cgroup, but in no hierarchy with
// the memory controller, so its memory cannot be limited.
var errNoMemoryController = errors.New("no memory controller in the task's cgroups")

// memoryLimits is Nomad's mapping of a task's resources to its cgroup:
// memory is the hard limit, or the soft one when memory_max is above it;
// memory_max = -1 leaves no hard limit. Bytes; 0 means not set.
func memoryLimits(r driver.Resources) (hard, soft int64) {
	mem := int64(r.MemoryMB) << 20
	switch {
	case r.MemoryMaxMB < 0:
		return 0, mem
	case r.MemoryMaxMB > r.MemoryMB:
		return int64(r.MemoryMaxMB) << 20, mem
	default:
		return mem, 0
	}
}

// setMemory writes the task's memory limits into its cgroups: memory.max
// and memory.low in a cgroup2 tree that has the memory controller (a pure
// v2 host), memory.limit_in_bytes and memory.soft_limit_in_bytes in the v1
// memory hierarchy (a hybrid host's).
func (c *cgroupSet) setMemory(r driver.Resources) error {
	hard, soft := memoryLimits(r)
	if hard == 0 && soft == 0 {
		return nil
	}
	type write struct {
		path  string
		value int64
	}
	var writes []write
	add := func(dir, probe, hardFile, softFile string) {
		if _, err := os.Stat(filepath.Join(dir, probe)); err != nil {
			return
		}
		writes = append(writes, write{filepath.Join(dir, hardFile), hard}, write{filepath.Join(dir, softFile), soft})
	}
	if c.unified != "" {
		add(c.unified, "memory.max", "memory.max", "memory.low")
	}
	for _, d := range c.v1 {
		add(d, "memory.limit_in_bytes", "memory.limit_in_bytes", "memory.soft_limit_in_bytes")
	}
	if len(writes) == 0 {
		return fmt.Errorf("cgroup %s: memory limit %d MB: %w", c.rel, max(hard, soft)>>20, errNoMemoryController)
	}
	for _, w := range writes {
		if w.value == 0 {
			continue
		}
		if err := os.WriteFile(w.path, []byte(strconv.FormatInt(w.value, 10)), 0); err != nil {
			return fmt.Errorf("set %s to %d: %w", w.path, w.value, err)
		}
	}
	return nil
}
