package docker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/task/driver"
)

// provenBy names, for every key of the docker table, the test that sees
// it applied in a container (or, for a key refused, the test that checks
// that verdict): a key added without one fails TestEveryKeyProven.
var provenBy = map[string]string{
	"image": "TestRunTask", "command": "TestRunTask", "args": "TestRunTask", "labels": "TestRunTask",
	"entrypoint": "TestConfigKeysApplied", "work_dir": "TestConfigKeysApplied", "hostname": "TestConfigKeysApplied, TestApplyNetworkRefusals",
	"network_mode":       "TestConfigKeysApplied (none), TestRunTask (the group's, through the pause container), TestApplyNetworkRefusals, TestRefusedKeys",
	"ports":              "TestPortFromHost, TestApplyNetworkRefusals",
	"dns_servers":        "TestConfigKeysApplied, TestApplyNetworkRefusals",
	"dns_search_domains": "TestConfigKeysApplied", "dns_options": "TestConfigKeysApplied", "extra_hosts": "TestConfigKeysApplied",
	"tmpfs": "TestConfigKeysApplied", "cap_add": "TestConfigKeysApplied, TestRefusedKeys", "cap_drop": "TestConfigKeysApplied",
	"security_opt": "TestConfigKeysApplied, TestRefusedKeys", "readonly_rootfs": "TestConfigKeysApplied", "init": "TestConfigKeysApplied",
	"tty": "TestConfigKeysApplied", "interactive": "TestConfigKeysApplied", "sysctl": "TestConfigKeysApplied",
	"ulimit": "TestConfigKeysApplied", "shm_size": "TestConfigKeysApplied", "pids_limit": "TestConfigKeysApplied",
	"logging": "TestConfigKeysApplied, TestRefusedKeys", "image_pull_timeout": "TestConfigKeysApplied, TestImageNotLocal",
	"force_pull": "TestConfigKeysApplied, TestImageNotLocal", "auth": "TestParseAuth", "auth_soft_fail": "TestParseAuth",
	"privileged": "TestPrivileged",
	"port_map":   "TestRefusedKeys", "network_aliases": "TestRefusedKeys", "ipv4_address": "TestRefusedKeys", "ipv6_address": "TestRefusedKeys",
	"mac_address": "TestRefusedKeys", "advertise_ipv6_address": "TestRefusedKeys", "volumes": "TestRefusedKeys", "mount": "TestRefusedKeys",
	"mounts": "TestRefusedKeys", "volume_driver": "TestRefusedKeys", "devices": "TestRefusedKeys", "cpu_hard_limit": "TestRefusedKeys",
	"cpu_cfs_period": "TestRefusedKeys", "cpuset_cpus": "TestRefusedKeys", "memory_hard_limit": "TestRefusedKeys", "ipc_mode": "TestRefusedKeys",
	"pid_mode": "TestRefusedKeys", "uts_mode": "TestRefusedKeys", "userns_mode": "TestRefusedKeys", "runtime": "TestRefusedKeys",
	"isolation": "TestRefusedKeys", "load": "TestRefusedKeys", "storage_opt": "TestRefusedKeys", "healthchecks": "TestRefusedKeys",
	"group_add": "TestRefusedKeys", "oom_score_adj": "TestRefusedKeys",
}

func TestEveryKeyProven(t *testing.T) {
	known := map[string]bool{}
	for _, r := range ConfigKeys() {
		known[r.Name] = true
		if provenBy[r.Name] == "" {
			t.Errorf("docker key %s (%s) has no test that proves its verdict: add one and name it in provenBy", r.Name, r.Verdict)
		}
	}
	for k := range provenBy {
		if !known[k] {
			t.Errorf("provenBy names %s, which is not a docker key", k)
		}
	}
}

// What berth cannot give is never dropped: a warning naming the key at
// validate and an error naming it (ConfigField, which jobspec turns into
// file:line:col) when the task starts.
func TestRefusedKeys(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		cfg    map[string]any
		field  string
		msg    string
	}{
		{"volumes", Policy{}, map[string]any{"volumes": []any{"/srv:/data"}}, "volumes", "would bind host paths the job chooses"},
		{"mount", Policy{}, map[string]any{"mount": []any{map[string]any{"type": "bind"}}}, "mount", "would bind host paths"},
		{"mounts", Policy{}, map[string]any{"mounts": []any{}}, "mounts", "would bind host paths"},
		{"volume_driver", Policy{}, map[string]any{"volume_driver": "x"}, "volume_driver", "would bind host paths"},
		{"port_map", Policy{}, map[string]any{"port_map": map[string]any{"http": 80}}, "port_map", "give the group's port a `to`"},
		{"devices", Policy{}, map[string]any{"devices": []any{map[string]any{"host_path": "/dev/fuse"}}}, "devices", "root on the host"},
		{"cpu_hard_limit", Policy{}, map[string]any{"cpu_hard_limit": true}, "cpu_hard_limit", "no CPU quota"},
		{"cpu_cfs_period", Policy{}, map[string]any{"cpu_cfs_period": 100000}, "cpu_cfs_period", "no CPU quota"},
		{"cpuset_cpus", Policy{}, map[string]any{"cpuset_cpus": "0"}, "cpuset_cpus", "no CPU quota"},
		{"memory_hard_limit", Policy{}, map[string]any{"memory_hard_limit": 512}, "memory_hard_limit", "memory_max"},
		{"network_aliases", Policy{}, map[string]any{"network_aliases": []any{"a"}}, "network_aliases", "assigns the task's addresses"},
		{"ipv4_address", Policy{}, map[string]any{"ipv4_address": "10.199.141.9"}, "ipv4_address", "assigns the task's addresses"},
		{"ipv6_address", Policy{}, map[string]any{"ipv6_address": "fd00::2"}, "ipv6_address", "assigns the task's addresses"},
		{"mac_address", Policy{}, map[string]any{"mac_address": "02:00:00:00:00:01"}, "mac_address", "assigns the task's addresses"},
		{"advertise_ipv6_address", Policy{}, map[string]any{"advertise_ipv6_address": true}, "advertise_ipv6_address", "assigns"},
		{"ipc_mode", Policy{}, map[string]any{"ipc_mode": "host"}, "ipc_mode", "private IPC"},
		{"pid_mode", Policy{}, map[string]any{"pid_mode": "host"}, "pid_mode", "private IPC, PID"},
		{"uts_mode", Policy{}, map[string]any{"uts_mode": "host"}, "uts_mode", "UTS"},
		{"userns_mode", Policy{}, map[string]any{"userns_mode": "host"}, "userns_mode", "user namespaces"},
		{"group_add", Policy{}, map[string]any{"group_add": []any{"disk"}}, "group_add", "namespaces"},
		{"runtime", Policy{}, map[string]any{"runtime": "runsc"}, "runtime", "default runtime"},
		{"isolation", Policy{}, map[string]any{"isolation": "hyperv"}, "isolation", "default runtime"},
		{"load", Policy{}, map[string]any{"load": "img.tar"}, "load", "loads no image archives"},
		{"storage_opt", Policy{}, map[string]any{"storage_opt": map[string]any{"size": "1G"}}, "storage_opt", "no storage options"},
		{"healthchecks", Policy{}, map[string]any{"healthchecks": []any{map[string]any{"disable": true}}}, "healthchecks", "HEALTHCHECK"},
		{"oom_score_adj", Policy{}, map[string]any{"oom_score_adj": 100}, "oom_score_adj", "not acted on"},
		{"log type", Policy{}, map[string]any{"logging": []any{map[string]any{"type": "syslog"}}}, "logging", `"syslog" is not supported`},
		{"log config", Policy{}, map[string]any{"logging": []any{map[string]any{"config": []any{map[string]any{"tag": "x"}}}}}, "logging", "copies the container's output"},
		{"container network", Policy{}, map[string]any{"network_mode": "container:x"}, "network_mode", "group's network"},
		{"docker network", Policy{}, map[string]any{"network_mode": "mynet"}, "network_mode", "a docker network"},
		{"cap_add outside allow_caps", Policy{}, map[string]any{"cap_add": []any{"SYS_ADMIN"}}, "cap_add", `"sys_admin" is not in this node's allow_caps`},
		{"seccomp off", Policy{}, map[string]any{"security_opt": []any{"seccomp=unconfined"}}, "security_opt", "docker_allow_privileged"},
		{"apparmor off", Policy{}, map[string]any{"security_opt": []any{"apparmor=unconfined"}}, "security_opt", "docker_allow_privileged"},
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
			if !errors.As(err, &ce) || ce.ConfigField() != tt.field || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("at start: %v, want an error on %q saying %q", err, tt.field, tt.msg)
			}
		})
	}
	allowed := Policy{AllowPrivileged: true, AllowCaps: []string{"all"}}
	cfg := map[string]any{"image": testImage, "cap_add": []any{"SYS_ADMIN"}, "security_opt": []any{"seccomp=unconfined"}, "privileged": true}
	if err := allowed.ValidateConfig(cfg); err != nil {
		t.Errorf("a node that allows them: ValidateConfig = %v", err)
	}
}

// Bad values and unknown keys are errors naming the key.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		cfg   map[string]any
		field string
		msg   string
	}{
		{map[string]any{}, "image", "config.image is required"},
		{map[string]any{"image": testImage, "imag": "x"}, "imag", "unknown config key(s) config.imag"},
		{map[string]any{"image": testImage, "tty": "yes"}, "tty", "must be true or false"},
		{map[string]any{"image": testImage, "dns_servers": []any{"nope"}}, "dns_servers", "is not an IP address"},
		{map[string]any{"image": testImage, "extra_hosts": []any{"nocolon"}}, "extra_hosts", "is not host:ip"},
		{map[string]any{"image": testImage, "ulimit": map[string]any{"nofile": "a:b"}}, "ulimit.nofile", `is not "n" or "soft:hard"`},
		{map[string]any{"image": testImage, "pids_limit": -1}, "pids_limit", "must be from 0"},
		{map[string]any{"image": testImage, "image_pull_timeout": "soon"}, "image_pull_timeout", "image_pull_timeout"},
		{map[string]any{"image": testImage, "auth": []any{map[string]any{"user": "x"}}}, "auth", "is not a key of auth"},
	}
	for _, tt := range tests {
		_, err := ParseConfig(tt.cfg)
		var ce *configError
		if !errors.As(err, &ce) || ce.ConfigField() != tt.field || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseConfig(%v) = %v, want an error on %q saying %q", tt.cfg, err, tt.field, tt.msg)
		}
	}
}

// auth is sent with a pull as X-Registry-Auth; auth_soft_fail is read.
func TestParseAuth(t *testing.T) {
	tc, err := ParseConfig(map[string]any{"image": testImage, "auth_soft_fail": true,
		"auth": []any{map[string]any{"username": "u", "password": "p", "email": "e", "server_address": "localhost:5000"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !tc.AuthSoftFail || tc.Auth != (Auth{Username: "u", Password: "p", Email: "e", ServerAddress: "localhost:5000"}) {
		t.Errorf("auth %+v soft %v", tc.Auth, tc.AuthSoftFail)
	}
	if got := registryAuth(tc.Auth); got != "eyJlbWFpbCI6ImUiLCJwYXNzd29yZCI6InAiLCJzZXJ2ZXJhZGRyZXNzIjoibG9jYWxob3N0OjUwMDAiLCJ1c2VybmFtZSI6InUifQ==" {
		t.Errorf("X-Registry-Auth %q", got)
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
		{"hostname in a group network", "/run/netns/x", TaskConfig{Hostname: "h"}, "config.hostname is not supported in a group network"},
		{"dns in a group network", "/run/netns/x", TaskConfig{DNSServers: []string{"10.199.141.53"}}, "config.dns_servers is not supported in a group network"},
		{"ports in the group's namespace", "/run/netns/x", TaskConfig{Ports: []string{"http"}, NetworkMode: "bridge"}, ""},
		{"hostname in the host's network", "", TaskConfig{Hostname: "h"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &containerConfig{}
			err := applyConfig(c, &driver.Task{AllocID: "a1", TaskName: "t", NetnsPath: tt.netns, Env: env}, &tt.tc)
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

// privileged runs only where the node allows it.
func TestPrivileged(t *testing.T) {
	requireDocker(t)
	cfg := map[string]any{"image": testImage, "command": "/bin/true", "privileged": true}
	d := newDriver(t, t.TempDir(), Policy{})
	task := testTask(t, cfg)
	if _, err := d.Start(testenv.Context(t, 30e9), task); err == nil || !strings.Contains(err.Error(), "docker_allow_privileged") {
		t.Fatalf("Start on a node that does not allow it: %v", err)
	}
	d2 := newDriver(t, t.TempDir(), Policy{AllowPrivileged: true})
	tc, err := ParseConfig(cfg)
	testenv.Must(t, err)
	c := d2.containerConfig(task, tc)
	testenv.Must(t, applyConfig(c, task, tc))
	if !c.HostConfig.Privileged {
		t.Fatal("privileged not in the container's HostConfig")
	}
	h, err := d2.Start(testenv.Context(t, 30e9), task)
	if err != nil && strings.Contains(err.Error(), "unable to apply caps: operation not permitted") {
		// Docker's privileged is every capability it knows; runc cannot
		// give one the host's bounding set lacks (this machine's root has
		// no CAP_SYS_RESOURCE). Podman gives the host's set instead.
		if left := containersOf(t, task.AllocID); len(left) > 0 {
			t.Errorf("containers left after the failed start: %v", left)
		}
		t.Skipf("this host cannot run a privileged docker container: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Destroy(context.Background()) })
	if st := inspect(t, d2, h.State().ContainerID); !st.HostConfig.Privileged {
		t.Errorf("not privileged")
	}
	waitTask(t, h)
}
