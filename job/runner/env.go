package runner

import (
	"sort"
	"strings"

	"github.com/berth/berth/job/jobspec"
)

// taskEnv adds a task's env block to base (PATH and the runtime's NOMAD_*
// variables) and returns it. `${env.X}` reads the task's environment, as
// in Nomad: X is looked up in base while the block is interpolated, and
// vars gets every env.X of the result for the driver config. The agent's
// own environment is never read. A NOMAD_* variable the runtime sets
// cannot be overridden by the block (validate warns about it).
func taskEnv(base, block, vars map[string]string) map[string]string {
	for k, v := range base {
		vars["env."+k] = v
	}
	keys := make([]string, 0, len(block))
	for k := range block {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(base)+len(block))
	for k, v := range base {
		out[k] = v
	}
	for _, k := range keys {
		if _, set := base[k]; set && strings.HasPrefix(k, "NOMAD_") {
			continue
		}
		out[k] = jobspec.Interpolate(block[k], vars)
	}
	for k, v := range out {
		vars["env."+k] = v
	}
	return out
}
