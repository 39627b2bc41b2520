package podman

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// inspectField is a field of podman's inspect answer by its dotted path
// ("HostConfig.ReadonlyRootfs"), nil when absent.
func inspectField(insp map[string]any, path string) any {
	var v any = insp
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// TestConfigKeysApplied starts a container with each config key berth
// runs and finds it applied twice: in podman's inspect answer (what the
// container was created with) and from inside the task (its /proc, its
// files), so that no key is only accepted.
func TestConfigKeysApplied(t *testing.T) {
	requirePodman(t)
	d := newDriver(t, t.TempDir())
	tests := []struct {
		key     string
		cfg     map[string]any
		policy  Policy
		probe   string
		inspect map[string]string // dotted path -> substring of its fmt.Sprint
		stdout  string
		// caps are bits of the task's effective capabilities (CapEff
		// in stdout) that must be set (true) or not.
		caps map[int]bool
		// memoryMB is the task's resources.memory.
		memoryMB int
	}{
		{key: "readonly_rootfs", cfg: map[string]any{"readonly_rootfs": true},
			probe: "touch /probe 2>&1; true", inspect: map[string]string{"HostConfig.ReadonlyRootfs": "true"}, stdout: "Read-only file system"},
		{key: "cap_drop", cfg: map[string]any{"cap_drop": []any{"NET_RAW", "chown"}},
			probe: "grep CapEff /proc/self/status", inspect: map[string]string{"HostConfig.CapDrop": "CAP_CHOWN CAP_NET_RAW"}, stdout: "CapEff:",
			caps: map[int]bool{0: false, 13: false, 5: true}},
		{key: "cap_add", cfg: map[string]any{"cap_add": []any{"MKNOD", "cap_audit_write"}},
			probe: "grep CapEff /proc/self/status", inspect: map[string]string{"EffectiveCaps": "CAP_MKNOD"}, stdout: "CapEff:",
			caps: map[int]bool{27: true, 29: true}},
		{key: "security_opt", cfg: map[string]any{"security_opt": []any{"no-new-privileges", "mask=/etc/hostname"}},
			probe: "grep NoNewPrivs /proc/self/status; cat /etc/hostname | wc -c", inspect: map[string]string{"HostConfig.SecurityOpt": "no-new-privileges"}, stdout: "NoNewPrivs:\t1\n0\n"},
		{key: "tmpfs", cfg: map[string]any{"tmpfs": []any{"/scratch:size=1m,mode=755", "/more"}},
			probe: "grep -E ' /(scratch|more) ' /proc/mounts", inspect: map[string]string{"HostConfig.Tmpfs": "/scratch"}, stdout: "tmpfs /scratch tmpfs rw,nosuid,nodev,relatime,size=1024k,mode=755"},
		{key: "sysctl", cfg: map[string]any{"sysctl": map[string]any{"kernel.msgmax": "12345"}},
			probe: "cat /proc/sys/kernel/msgmax", stdout: "12345\n"}, // podman 4.3's inspect does not show sysctls
		{key: "devices", cfg: map[string]any{"devices": []any{"/dev/null:/dev/btnull:rw"}}, policy: Policy{AllowPrivileged: true},
			probe: "echo x > /dev/btnull && ls -l /dev/btnull", inspect: map[string]string{"HostConfig.Devices": "/dev/btnull"}, stdout: "1,   3"},
		{key: "init", cfg: map[string]any{"init": true, "init_path": "/usr/libexec/podman/catatonit"},
			probe: "tr '\\0' ' ' < /proc/1/cmdline", inspect: map[string]string{"HostConfig.Init": "true"}, stdout: "/run/podman-init -- /bin/sh"},
		{key: "shm_size", cfg: map[string]any{"shm_size": "3m"},
			probe: "grep ' /dev/shm ' /proc/mounts", inspect: map[string]string{"HostConfig.ShmSize": "3.145728e+06"}, stdout: "size=3072k"},
		{key: "memory", cfg: map[string]any{"memory_reservation": "32m", "memory_swappiness": 7},
			probe: "cat /sys/fs/cgroup/memory/memory.soft_limit_in_bytes /sys/fs/cgroup/memory/memory.swappiness", inspect: map[string]string{"HostConfig.MemoryReservation": "3.3554432e+07", "HostConfig.MemorySwappiness": "7"}, stdout: "33554432\n7\n"},
		{key: "memory_swap", cfg: map[string]any{"memory_swap": "96m"}, memoryMB: 64,
			probe:   "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes /sys/fs/cgroup/memory/memory.limit_in_bytes",
			inspect: map[string]string{"HostConfig.MemorySwap": "1.00663296e+08"}, stdout: "100663296\n67108864\n"},
		{key: "pids_limit", cfg: map[string]any{"pids_limit": 64},
			probe: "cat /sys/fs/cgroup/pids/pids.max", inspect: map[string]string{"HostConfig.PidsLimit": "64"}, stdout: "64\n"},
		{key: "ulimit", cfg: map[string]any{"ulimit": map[string]any{"nofile": "512:1024", "core": "0"}},
			probe: "ulimit -n; ulimit -Hn; ulimit -c", inspect: map[string]string{"HostConfig.Ulimits": "RLIMIT_NOFILE"}, stdout: "512\n1024\n0\n"},
		{key: "oom_score_adj", cfg: map[string]any{"oom_score_adj": 321},
			probe: "cat /proc/self/oom_score_adj", inspect: map[string]string{"HostConfig.OomScoreAdj": "321"}, stdout: "321\n"},
		{key: "extra_hosts", cfg: map[string]any{"extra_hosts": []any{"db.internal:10.199.207.10"}},
			probe: "grep db.internal /etc/hosts", inspect: map[string]string{"HostConfig.ExtraHosts": "db.internal:10.199.207.10"}, stdout: "10.199.207.10\tdb.internal"},
		{key: "dns", cfg: map[string]any{"dns": []any{"10.199.207.53"}},
			probe: "grep nameserver /etc/resolv.conf", inspect: map[string]string{"HostConfig.Dns": "10.199.207.53"}, stdout: "nameserver 10.199.207.53\n"},
		{key: "tty", cfg: map[string]any{"tty": true},
			probe: "[ -t 1 ] && echo tty", inspect: map[string]string{"Config.Tty": "true"}, stdout: "tty"},
		{key: "network_mode none", cfg: map[string]any{"network_mode": "none"},
			probe: "ls /sys/class/net | wc -l", inspect: map[string]string{"HostConfig.NetworkMode": "none"}, stdout: "1\n"},
		{key: "entrypoint", cfg: map[string]any{"entrypoint": []any{"/bin/echo", "ep"}},
			inspect: map[string]string{"Config.Entrypoint": "/bin/echo ep"}, stdout: "ep /bin/sh -c"},
		{key: "userns", cfg: map[string]any{"userns": "host"},
			probe: "cat /proc/self/uid_map", stdout: "4294967295"}, // the host's whole range; podman 4.3 shows no mode for host,
		{key: "working_dir", cfg: map[string]any{"working_dir": "/etc"},
			probe: "pwd", inspect: map[string]string{"Config.WorkingDir": "/etc"}, stdout: "/etc\n"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			cfg := map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", tt.probe}}
			for k, v := range tt.cfg {
				cfg[k] = v
			}
			d.policy = tt.policy
			task := testTask(t, cfg)
			task.Resources.MemoryMB = tt.memoryMB
			h := startTask(t, d, task)
			defer destroy(t, h)
			if res := waitTask(t, h); res.ExitCode != 0 {
				t.Errorf("probe %q exited %d", tt.probe, res.ExitCode)
			}
			var insp map[string]any
			if _, err := d.c.do(context.Background(), http.MethodGet, "/containers/"+url.PathEscape(h.State().ContainerID)+"/json", nil, nil, &insp); err != nil {
				t.Fatal(err)
			}
			for path, want := range tt.inspect {
				if got := fmt.Sprint(inspectField(insp, path)); !strings.Contains(got, want) {
					t.Errorf("inspect %s = %s, want %q in it", path, got, want)
				}
			}
			stdout := readFile(t, filepath.Join(task.LogDir, "t1.stdout.0"))
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("the task printed %q, want %q in it", stdout, tt.stdout)
			}
			if len(tt.caps) > 0 {
				var eff uint64
				if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(stdout, "CapEff:")), "%x", &eff); err != nil {
					t.Fatalf("reading CapEff of %q: %v", stdout, err)
				}
				for bit, want := range tt.caps {
					if got := eff&(1<<bit) != 0; got != want {
						t.Errorf("capability %d in the task's CapEff %x: %v, want %v", bit, eff, got, want)
					}
				}
			}
		})
	}
}
