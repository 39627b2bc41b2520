package runner

import (
	"sort"
	"strconv"
	"strings"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
)

// taskEnv adds a task's env block to base (PATH and the runtime's NOMAD_*
// variables) and returns it. `${env.X}` reads the task's environment, as
// in Nomad: X is looked up in base while the block is interpolated, and
// vars gets every env.X of the result for the driver config (base holds
// the agent's environment where the driver inherits it, agentEnv). A NOMAD_* variable the runtime sets
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

// inheritsAgentEnv says whether a task of this driver starts with the
// agent's environment: Nomad gives it to every driver whose tasks do not
// run an image of their own (raw_exec, exec), never to a container's.
func inheritsAgentEnv(driverName string) bool {
	return driverName == "raw_exec" || driverName == "exec"
}

// agentEnv is environ (os.Environ of the agent) without what a task must
// never inherit (deniedAgentEnv).
func agentEnv(environ []string) map[string]string {
	out := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || deniedAgentEnv(k) {
			continue
		}
		out[k] = v
	}
	return out
}

// deniedAgentEnv: Nomad 1.6.5's default client env.denylist
// (command/agent/host.DefaultEnvDenyList), and berth's own secrets: its
// API token (api.EnvToken) and the token its Nomad janitor reads from
// NOMAD_TOKEN (node/nomad.EnvToken; Nomad itself passes NOMAD_TOKEN on,
// berth does not hand its credentials to workloads).
func deniedAgentEnv(name string) bool {
	switch name {
	case "CONSUL_TOKEN", "CONSUL_HTTP_TOKEN", "VAULT_TOKEN", "NOMAD_LICENSE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"GOOGLE_APPLICATION_CREDENTIALS",
		api.EnvToken, "NOMAD_TOKEN":
		return true
	}
	return false
}

// resourceVars sets Nomad's NOMAD_CPU_LIMIT (MHz), NOMAD_MEMORY_LIMIT and,
// when memory_max is set, NOMAD_MEMORY_MAX_LIMIT (MB). A task reserving
// whole cores gets no NOMAD_CPU_LIMIT: Nomad derives it from the node's
// per-core speed, which berth does not fingerprint.
func resourceVars(vars map[string]string, r jobspec.Resources) {
	if r.Cores == 0 && r.CPU > 0 {
		vars["NOMAD_CPU_LIMIT"] = strconv.Itoa(r.CPU)
	}
	if r.MemoryMB > 0 {
		vars["NOMAD_MEMORY_LIMIT"] = strconv.Itoa(r.MemoryMB)
	}
	if r.MemoryMaxMB > 0 {
		vars["NOMAD_MEMORY_MAX_LIMIT"] = strconv.Itoa(r.MemoryMaxMB)
	}
}

// metaVars adds one meta block as Nomad does: NOMAD_META_<key> as written
// and NOMAD_META_<KEY> upper-cased, each with what is not a letter, digit,
// '_' or '.' made '_' (Nomad's helper.CleanEnvVar); meta.<key> as written
// for interpolation.
func metaVars(vars, meta map[string]string) {
	for k, v := range meta {
		vars["NOMAD_META_"+cleanEnvName(k)] = v
		vars["NOMAD_META_"+cleanEnvName(strings.ToUpper(k))] = v
		vars["meta."+k] = v
	}
}

// cleanEnvName replaces what may not be in an environment variable's name
// with '_' (Nomad's helper.CleanEnvVar: letters, '_', '.', and digits
// after the first byte are kept).
func cleanEnvName(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '_', c == '.', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', i > 0 && c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}
