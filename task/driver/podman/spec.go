package podman

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/berth/berth/task/driver"
)

// applyConfig puts what the task's config block asks for into the
// container's spec: every key configKeys says runs. Its errors are what
// only the task itself can tell (its network, its ports), naming the key.
func applyConfig(s *specGenerator, t *driver.Task, tc *TaskConfig) error {
	if err := applyNetwork(s, t, tc); err != nil {
		return err
	}
	applySecurity(s, tc)
	applyStorage(s, tc)
	return applyResources(s, t, tc)
}

// applyNetwork: the task is in its group's network unless network_mode
// says otherwise; ports are published by that network (berth maps the
// host port to the port's `to` into the namespace), so there is nothing
// to publish in the host's network, where the container binds the host's
// ports itself: a job that lists ports there would be advertised on a
// port where nothing listens, and is refused.
func applyNetwork(s *specGenerator, t *driver.Task, tc *TaskConfig) error {
	switch m := tc.NetworkMode; {
	case m == "host":
		s.Netns = namespace{NSMode: "host"}
	case m == "none":
		s.Netns = namespace{NSMode: "none"}
	case strings.HasPrefix(m, "task:"):
		s.Netns = namespace{NSMode: "container", Value: ContainerName(t.AllocID, strings.TrimPrefix(m, "task:"))}
	case m == "bridge" && t.NetnsPath == "":
		return &configError{field: "network_mode", msg: `podman: config.network_mode "bridge": the group is in the host's network, berth has no bridge to put the task on: set the group's network { mode = "bridge" }`}
	}
	for _, p := range tc.Ports {
		if _, ok := t.Env["NOMAD_HOST_PORT_"+p]; !ok {
			return &configError{field: "ports", msg: fmt.Sprintf("podman: config.ports: port %q is not a port of the group's network block", p)}
		}
		if s.Netns.NSMode == "host" {
			return &configError{field: "ports", msg: fmt.Sprintf("podman: config.ports: the task is in the host's network, where nothing is mapped: "+
				"port %q is the host's port %s, drop ports and have the task listen on NOMAD_PORT_%s, or set the group's network { mode = \"bridge\" } to map it to its `to`",
				p, t.Env["NOMAD_HOST_PORT_"+p], p)}
		}
	}
	s.DNSServers = tc.DNS
	s.HostAdd = tc.ExtraHosts
	return nil
}

// applySecurity: capabilities, security options, the root filesystem, the
// user namespace (Policy.Check has refused what the node does not allow).
func applySecurity(s *specGenerator, tc *TaskConfig) {
	s.ReadOnlyFilesystem = tc.ReadonlyRootfs
	s.CapAdd = podmanCaps(tc.CapAdd)
	s.CapDrop = podmanCaps(tc.CapDrop)
	s.ApparmorProfile = tc.AppArmor
	s.SelinuxOpts = append([]string(nil), tc.SelinuxOpts...)
	for _, o := range tc.SecurityOpt {
		name, val, _ := strings.Cut(o, "=")
		switch name {
		case "no-new-privileges":
			s.NoNewPrivileges = val != "false"
		case "seccomp":
			s.SeccompProfilePath = val
			annotate(s, "io.podman.annotations.seccomp", val)
		case "apparmor":
			s.ApparmorProfile = val
			annotate(s, "io.podman.annotations.apparmor", val)
		case "label":
			s.SelinuxOpts = append(s.SelinuxOpts, val)
			// What podman's CLI records, so that inspect shows it.
			annotate(s, "io.podman.annotations.label", strings.Join(s.SelinuxOpts, ",label="))
		case "mask":
			s.Mask = append(s.Mask, strings.Split(val, ":")...)
		case "unmask":
			s.Unmask = append(s.Unmask, strings.Split(val, ":")...)
		}
	}
	if tc.Userns != "" {
		mode, val, _ := strings.Cut(tc.Userns, ":")
		if mode == "ns" {
			mode = "path"
		}
		s.Userns = &namespace{NSMode: mode, Value: val}
	}
	s.Terminal = tc.TTY
	s.Sysctl = tc.Sysctl
}

func annotate(s *specGenerator, k, v string) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[k] = v
}

// podmanCaps is podman's spelling of Nomad's capability names.
func podmanCaps(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		if c == "all" {
			out = append(out, "ALL")
			continue
		}
		out = append(out, "CAP_"+strings.ToUpper(c))
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// applyStorage: tmpfs mounts, devices, init, /dev/shm.
func applyStorage(s *specGenerator, tc *TaskConfig) {
	for _, t := range tc.Tmpfs {
		dst, opts, _ := strings.Cut(t, ":")
		m := mount{Destination: dst, Type: "tmpfs", Source: "tmpfs"}
		if opts != "" {
			m.Options = strings.Split(opts, ",")
		}
		s.Mounts = append(s.Mounts, m)
	}
	for _, dev := range tc.Devices {
		s.Devices = append(s.Devices, device{Path: dev})
	}
	s.Init, s.InitPath = tc.Init, tc.InitPath
	if tc.ShmSize > 0 {
		n := tc.ShmSize
		s.ShmSize = &n
	}
}

// applyResources: memory reservation, swap and swappiness, the PID limit,
// rlimits (the job's ulimit over berth's defaults), oom_score_adj.
// memory_swap is memory plus swap: podman takes it only with a memory
// limit, which is then the task's resources.memory (memory_max when
// higher), as Nomad's podman driver sets it.
func applyResources(s *specGenerator, t *driver.Task, tc *TaskConfig) error {
	var r resources
	var mem memoryResources
	if tc.MemoryReservation > 0 {
		mem.Reservation = &tc.MemoryReservation
	}
	if tc.MemorySwap != 0 {
		limit := int64(max(t.Resources.MemoryMB, t.Resources.MemoryMaxMB)) << 20
		if limit <= 0 {
			return &configError{field: "memory_swap", msg: "podman: config.memory_swap needs the task's resources.memory: it is memory plus swap"}
		}
		if tc.MemorySwap > 0 && tc.MemorySwap < limit {
			return &configError{field: "memory_swap", msg: fmt.Sprintf("podman: config.memory_swap (%d bytes) is memory plus swap: it must be at least the task's memory (%d bytes)", tc.MemorySwap, limit)}
		}
		mem.Limit, mem.Swap = &limit, &tc.MemorySwap
	}
	if tc.MemorySwappiness >= 0 {
		sw := uint64(tc.MemorySwappiness)
		mem.Swappiness = &sw
	}
	if mem != (memoryResources{}) {
		r.Memory = &mem
	}
	if tc.PidsLimit > 0 {
		r.Pids = &pidsResources{Limit: int64(tc.PidsLimit)}
	}
	if r != (resources{}) {
		s.ResourceLimits = &r
	}
	s.OOMScoreAdj = tc.OOMScoreAdj
	names := make([]string, 0, len(tc.Ulimit))
	for n := range tc.Ulimit {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		soft, hard := ulimitValues(tc.Ulimit[n])
		name := strings.TrimPrefix(strings.ToLower(n), "rlimit_")
		replaced := false
		for i := range s.Rlimits {
			if s.Rlimits[i].Type == name {
				s.Rlimits[i].Soft, s.Rlimits[i].Hard, replaced = soft, hard, true
			}
		}
		if !replaced {
			s.Rlimits = append(s.Rlimits, rlimit{Type: name, Soft: soft, Hard: hard})
		}
	}
	return nil
}

// ulimitValues reads "n" or "soft:hard" (checked by the decoder); -1 is
// unlimited.
func ulimitValues(v string) (soft, hard uint64) {
	parse := func(s string) uint64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return math.MaxUint64
		}
		return uint64(n)
	}
	a, b, ok := strings.Cut(v, ":")
	if !ok {
		return parse(a), parse(a)
	}
	return parse(a), parse(b)
}
