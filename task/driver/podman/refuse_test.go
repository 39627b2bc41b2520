package podman

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berth/berth/task/driver"
)

// What berth cannot give is never dropped: a warning naming the key at
// validate (the job file is valid, as in Nomad) and an error naming it
// when the task starts.
func TestRefusedKeys(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		cfg    map[string]any
		field  string
		msg    string
	}{
		{"volumes", Policy{}, map[string]any{"volumes": []any{"/srv:/data"}}, "volumes", "would bind host paths the job chooses"},
		{"port_map", Policy{}, map[string]any{"port_map": map[string]any{"http": 80}}, "port_map", "give the group's port a `to`"},
		{"cpu_hard_limit", Policy{}, map[string]any{"cpu_hard_limit": true}, "cpu_hard_limit", "no CPU quota"},
		{"cpu_cfs_period", Policy{}, map[string]any{"cpu_cfs_period": 100000}, "cpu_cfs_period", "no CPU quota"},
		{"force_pull", Policy{}, map[string]any{"force_pull": true}, "force_pull", "pulls no images"},
		{"arch", Policy{}, map[string]any{"arch": "arm64"}, "arch", "pulls no images"},
		{"os", Policy{}, map[string]any{"os": "linux"}, "os", "pulls no images"},
		{"variant", Policy{}, map[string]any{"variant": "v8"}, "variant", "pulls no images"},
		{"static_ips", Policy{}, map[string]any{"static_ips": []any{"10.0.0.2"}}, "static_ips", "assigns the task's addresses"},
		{"ipv4_address", Policy{}, map[string]any{"ipv4_address": "10.199.207.2"}, "ipv4_address", "assigns the task's addresses"},
		{"ipv6_address", Policy{}, map[string]any{"ipv6_address": "fd00::2"}, "ipv6_address", "assigns the task's addresses"},
		{"static_mac", Policy{}, map[string]any{"static_mac": "02:00:00:00:00:01"}, "static_mac", "assigns the task's addresses"},
		{"ipc_mode", Policy{}, map[string]any{"ipc_mode": "host"}, "ipc_mode", "private IPC namespace"},
		{"socket", Policy{}, map[string]any{"socket": "app1"}, "socket", "own podman service"},
		{"journald", Policy{}, map[string]any{"logging": map[string]any{"driver": "journald"}}, "logging", "use driver \"nomad\""},
		{"log options", Policy{}, map[string]any{"logging": map[string]any{"options": map[string]any{"tag": "x"}}}, "logging", "copies the container's output"},
		{"slirp4netns", Policy{}, map[string]any{"network_mode": "slirp4netns"}, "network_mode", "group's network"},
		{"ns path", Policy{}, map[string]any{"network_mode": "ns:/proc/1/ns/net"}, "network_mode", "group's network"},
		{"podman network", Policy{}, map[string]any{"network_mode": "mynet"}, "network_mode", "a podman network"},
		{"cap_add outside allow_caps", Policy{}, map[string]any{"cap_add": []any{"SYS_ADMIN"}}, "cap_add", `"sys_admin" is not in this node's allow_caps`},
		{"cap_add outside the node's", Policy{AllowCaps: []string{"CAP_NET_RAW"}}, map[string]any{"cap_add": []any{"chown"}}, "cap_add", "allow_caps (net_raw)"},
		{"devices", Policy{}, map[string]any{"devices": []any{"/dev/fuse"}}, "devices", "podman_allow_privileged"},
		{"seccomp off", Policy{}, map[string]any{"security_opt": []any{"seccomp=unconfined"}}, "security_opt", "podman_allow_privileged"},
		{"seccomp profile", Policy{}, map[string]any{"security_opt": []any{"seccomp=/etc/x.json"}}, "security_opt", "podman_allow_privileged"},
		{"labels off", Policy{}, map[string]any{"selinux_opts": []any{"disable"}}, "selinux_opts", "podman_allow_privileged"},
		{"apparmor off", Policy{}, map[string]any{"apparmor_profile": "unconfined"}, "apparmor_profile", "podman_allow_privileged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := map[string]any{"image": testImage}
			for k, v := range tt.cfg {
				cfg[k] = v
			}
			err := tt.policy.ValidateConfig(cfg)
			if err == nil || !driver.OnlyWarnings(err) {
				t.Fatalf("ValidateConfig = %v, want only warnings", err)
			}
			var w *driver.ConfigWarning
			if !errors.As(err, &w) || w.Field != tt.field || !strings.Contains(w.Msg, tt.msg) || !strings.Contains(w.Msg, "will not start on this node") {
				t.Errorf("warning = %#v, want field %q and %q", w, tt.field, tt.msg)
			}
			tc, err := ParseConfig(cfg)
			if err == nil {
				err = tt.policy.Check(tc)
			}
			var ce *configError
			if !errors.As(err, &ce) || ce.ConfigField() != tt.field || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("at start: %v, want an error on %q saying %q", err, tt.field, tt.msg)
			}
		})
	}
	allowed := Policy{AllowPrivileged: true, AllowCaps: []string{"all"}}
	cfg := map[string]any{"image": testImage, "cap_add": []any{"SYS_ADMIN"}, "devices": []any{"/dev/fuse"}, "security_opt": []any{"seccomp=unconfined"}}
	if err := allowed.ValidateConfig(cfg); err != nil {
		t.Errorf("a node that allows them: ValidateConfig = %v", err)
	}
}

// What only the task tells (its network, its ports) is checked at start.
func TestApplyNetworkRefusals(t *testing.T) {
	env := map[string]string{"NOMAD_HOST_PORT_http": "25601", "NOMAD_PORT_http": "25601"}
	tests := []struct {
		name  string
		netns string
		tc    TaskConfig
		want  string
	}{
		{"ports in the host's network", "", TaskConfig{Ports: []string{"http"}}, "config.ports: the task is in the host's network, where nothing is mapped: port \"http\" is the host's port 25601"},
		{"ports with network_mode host", "/run/netns/x", TaskConfig{Ports: []string{"http"}, NetworkMode: "host"}, "listen on NOMAD_PORT_http"},
		{"unknown port", "/run/netns/x", TaskConfig{Ports: []string{"db"}}, `config.ports: port "db" is not a port of the group's network block`},
		{"bridge without a namespace", "", TaskConfig{NetworkMode: "bridge"}, `config.network_mode "bridge": the group is in the host's network`},
		{"ports in the group's namespace", "/run/netns/x", TaskConfig{Ports: []string{"http"}, NetworkMode: "bridge"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &specGenerator{Netns: namespace{NSMode: "host"}}
			if tt.netns != "" {
				s.Netns = namespace{NSMode: "path", Value: tt.netns}
			}
			err := applyConfig(s, &driver.Task{AllocID: "a1", TaskName: "t", NetnsPath: tt.netns, Env: env}, &tt.tc)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("applyConfig = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("applyConfig = %v, want %q", err, tt.want)
			}
		})
	}
}

// The container spec carries each key in podman's terms.
func TestApplyConfigSpec(t *testing.T) {
	tc, err := ParseConfig(map[string]any{"image": testImage,
		"cap_add": []any{"mknod"}, "cap_drop": []any{"ALL"}, "tmpfs": []any{"/run:size=1m,mode=755", "/tmp"},
		"security_opt": []any{"no-new-privileges", "apparmor=p", "label=type:t", "mask=/a:/b"},
		"ulimit":       map[string]any{"nofile": "10:20", "core": "-1"}, "memory_swap": "-1", "memory_swappiness": 0,
		"network_mode": "task:db", "userns": "ns:/proc/1/ns/user"})
	if err != nil {
		t.Fatal(err)
	}
	s := &specGenerator{Rlimits: []rlimit{{Type: "nofile", Soft: 1, Hard: 1}, {Type: "nproc", Soft: 2, Hard: 2}}}
	if err := applyConfig(s, &driver.Task{AllocID: "a1", TaskName: "web", Resources: driver.Resources{MemoryMB: 64}}, tc); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%v %v %v %v %v %v %v %+v %v %d %d %+v", s.CapAdd, s.CapDrop, s.Mounts, s.NoNewPrivileges, s.ApparmorProfile,
		s.SelinuxOpts, s.Mask, s.Rlimits, s.Netns, *s.ResourceLimits.Memory.Swap, *s.ResourceLimits.Memory.Swappiness, *s.Userns)
	want := "[CAP_MKNOD] [ALL] [{/run tmpfs tmpfs [size=1m mode=755]} {/tmp tmpfs tmpfs []}] true p [type:t] [/a /b] " +
		"[{Type:nofile Hard:20 Soft:10} {Type:nproc Hard:2 Soft:2} {Type:core Hard:18446744073709551615 Soft:18446744073709551615}] " +
		"{container berth-a1-db} -1 0 {NSMode:path Value:/proc/1/ns/user}"
	if got != want {
		t.Errorf("spec:\n got %s\nwant %s", got, want)
	}
}
