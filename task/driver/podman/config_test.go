package podman

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]any
		want    *TaskConfig
		wantErr string // exact message when set
		errHas  string // substring when set
		errAll  []string
	}{
		{
			name:    "missing image",
			cfg:     map[string]any{"command": "/bin/sh"},
			wantErr: "podman: config.image is required",
		},
		{
			name:    "empty image",
			cfg:     map[string]any{"image": " "},
			wantErr: "podman: config.image is required",
		},
		{
			name:   "image not a string",
			cfg:    map[string]any{"image": 3},
			errHas: "podman: config.image must be a string",
		},
		{
			name:   "args not a list",
			cfg:    map[string]any{"image": "busybox", "args": "-c exit"},
			errHas: "podman: config.args must be a list of strings",
		},
		{
			name:   "args with a list",
			cfg:    map[string]any{"image": "busybox", "args": []any{"-c", []any{"x"}}},
			errHas: "podman: config.args must be a list of strings",
		},
		{
			name:   "unknown key",
			cfg:    map[string]any{"image": "busybox", "mounts": 1, "volume": []any{}},
			errHas: "podman: unknown config key(s) config.mounts, config.volume (known: apparmor_profile, arch, args, auth,",
		},
		{
			name:   "entrypoint not a list",
			cfg:    map[string]any{"image": "busybox", "entrypoint": 1},
			errHas: "podman: config.entrypoint must be a string or a list of strings",
		},
		{
			name:   "label not a string",
			cfg:    map[string]any{"image": "busybox", "labels": map[string]any{"a": 1}},
			errHas: "podman: config.labels.a must be a string",
		},
		{
			name:   "command a list",
			cfg:    map[string]any{"image": "busybox", "command": []any{"sh"}},
			errHas: "podman: config.command must be a string",
		},
		{
			name: "full",
			cfg: map[string]any{
				"image":       "busybox:latest",
				"command":     "/bin/sh",
				"args":        []any{"-c", "exit 0"},
				"entrypoint":  "/bin/env",
				"working_dir": "/tmp",
				"hostname":    "web",
				"labels":      []map[string]any{{"a": "1"}, {"b": "2"}},
			},
			want: &TaskConfig{
				Image: "busybox:latest", Command: "/bin/sh", Args: []string{"-c", "exit 0"},
				Entrypoint: []string{"/bin/env"}, WorkingDir: "/tmp", Hostname: "web",
				Labels: map[string]string{"a": "1", "b": "2"}, MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute,
			},
		},
		{
			name: "typed lists",
			cfg:  map[string]any{"image": "busybox", "args": []string{"x"}, "entrypoint": []any{"/bin/sh", "-c"}, "labels": map[string]string{"k": "v"}},
			want: &TaskConfig{Image: "busybox", Args: []string{"x"}, Entrypoint: []string{"/bin/sh", "-c"}, Labels: map[string]string{"k": "v"},
				MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute},
		},
		{
			name: "every Nomad plugin key berth runs",
			cfg: map[string]any{
				"image": "localhost/busybox", "network_mode": "task:web", "ports": []any{"http"},
				"dns": []any{"10.199.130.1"}, "extra_hosts": []any{"db:10.199.130.9"}, "tmpfs": []any{"/run:size=64m"},
				"devices": []any{"/dev/fuse"}, "cap_add": []any{"NET_ADMIN"}, "cap_drop": []any{"ALL"},
				"security_opt": []any{"no-new-privileges"}, "selinux_opts": []any{"type:t"}, "apparmor_profile": "unconfined",
				"privileged": true, "readonly_rootfs": true, "userns": "keep-id", "init": true, "init_path": "/usr/libexec/podman/catatonit",
				"tty": true, "sysctl": map[string]any{"net.core.somaxconn": "1024"}, "ulimit": map[string]any{"nofile": "1024:2048", "nproc": "64"},
				"shm_size": "64m", "memory_reservation": "1g", "memory_swap": "512", "memory_swappiness": int64(10), "pids_limit": int64(100),
				"cpu_hard_limit": false, "socket": "default", "oom_score_adj": int64(10),
				"logging": []any{map[string]any{"driver": "nomad"}},
				"auth":    map[string]any{"username": "u", "password": "p", "tls_verify": false}, "auth_soft_fail": true,
				"force_pull": false, "image_pull_timeout": "10m",
			},
			want: &TaskConfig{
				Image: "localhost/busybox", NetworkMode: "task:web", Ports: []string{"http"},
				DNS: []string{"10.199.130.1"}, ExtraHosts: []string{"db:10.199.130.9"},
				Tmpfs: []string{"/run:size=64m"}, Devices: []string{"/dev/fuse"}, CapAdd: []string{"net_admin"}, CapDrop: []string{"all"},
				SecurityOpt: []string{"no-new-privileges"}, SelinuxOpts: []string{"type:t"}, AppArmor: "unconfined",
				Privileged: true, ReadonlyRootfs: true, Userns: "keep-id", Init: true, InitPath: "/usr/libexec/podman/catatonit", TTY: true,
				Sysctl: map[string]string{"net.core.somaxconn": "1024"}, Ulimit: map[string]string{"nofile": "1024:2048", "nproc": "64"},
				OOMScoreAdj: new(10),
				ShmSize:     64 << 20, MemoryReservation: 1 << 30, MemorySwap: 512, MemorySwappiness: 10, PidsLimit: 100,
				Socket:  "default",
				Logging: Logging{Driver: "nomad"},
				Auth:    Auth{Username: "u", Password: "p", TLSVerify: new(false)}, AuthSoftFail: true,
				ImagePullTimeout: 10 * time.Minute,
			},
		},
		{
			name:    "unknown key of a nested block",
			cfg:     map[string]any{"image": "b", "logging": map[string]any{"drivr": "nomad"}},
			wantErr: "podman: config.logging.drivr is not a key of logging (driver, options)",
		},
		{
			name:   "unknown keys of auth, sorted",
			cfg:    map[string]any{"image": "b", "auth": []any{map[string]any{"user": "u", "pass": "p"}}},
			errAll: []string{"config.auth.pass is not a key of auth (username, password, tls_verify)\npodman: config.auth.user is not a key of auth"},
			errHas: "config.auth.pass",
		},
		{
			name: "auth without tls_verify",
			cfg:  map[string]any{"image": "b", "auth": map[string]any{"username": "u"}, "entrypoint": ""},
			want: &TaskConfig{Image: "b", Auth: Auth{Username: "u"}, MemorySwappiness: -1, ImagePullTimeout: 5 * time.Minute},
		},
		{
			name:   "two blocks of logging",
			cfg:    map[string]any{"image": "b", "logging": []any{map[string]any{}, map[string]any{}}},
			errHas: "podman: config.logging must be one block, got 2",
		},
		{
			name:   "bad plugin values",
			cfg:    map[string]any{"image": "b", "network_mode": "weird!", "shm_size": "64 megs", "ulimit": map[string]any{"nofile": "lots"}, "logging": map[string]any{"driver": "syslog"}, "memory_swappiness": int64(200)},
			errHas: "podman: config.network_mode \"weird!\" is not a network mode",
		},
		{
			name:   "bad plugin values, every one",
			cfg:    map[string]any{"image": "b", "network_mode": "weird!", "shm_size": "64 megs", "ulimit": map[string]any{"nofile": "lots"}, "logging": map[string]any{"driver": "syslog"}, "memory_swappiness": int64(200), "dns": []any{"dns.example"}, "security_opt": []any{"seccomp"}, "cap_drop": []any{"NET ADMIN"}, "userns": "mine"},
			errHas: "config.shm_size \"64 megs\" is not a size",
			errAll: []string{`config.ulimit.nofile "lots" is not`, `config.logging.driver "syslog" is not a log driver`,
				"config.memory_swappiness must be from 0 to 100, got 200", `config.network_mode "weird!" is not a network mode`,
				`config.dns "dns.example" is not an IP address`, `config.security_opt "seccomp" is not a security option`,
				`config.cap_drop "NET ADMIN" is not a capability name`, `config.userns "mine" is not a user namespace mode`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig(tt.cfg)
			if tt.wantErr == "" && tt.errHas == "" {
				if err != nil {
					t.Fatalf("ParseConfig: %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("ParseConfig = %+v, want %+v", got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseConfig succeeded, want error")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error %v does not match ErrInvalidConfig", err)
			}
			if tt.wantErr != "" && err.Error() != tt.wantErr {
				t.Errorf("error = %q, want %q", err, tt.wantErr)
			}
			for _, want := range append([]string{tt.errHas}, tt.errAll...) {
				if want != "" && !strings.Contains(err.Error(), want) {
					t.Errorf("error = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestTaskConfigCommand(t *testing.T) {
	tests := []struct {
		name string
		tc   TaskConfig
		want []string
	}{
		{"image default", TaskConfig{}, nil},
		{"command only", TaskConfig{Command: "/bin/true"}, []string{"/bin/true"}},
		{"command and args", TaskConfig{Command: "/bin/sh", Args: []string{"-c", "exit 3"}}, []string{"/bin/sh", "-c", "exit 3"}},
		{"args only", TaskConfig{Args: []string{"-x"}}, []string{"-x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tc.command(); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("command() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestContainerName(t *testing.T) {
	tests := []struct{ alloc, task, want string }{
		{"0b6f1c2e-8d", "web", "berth-0b6f1c2e-8d-web"},
		{"a/b", "my task:1", "berth-a_b-my_task_1"},
	}
	for _, tt := range tests {
		if got := ContainerName(tt.alloc, tt.task); got != tt.want {
			t.Errorf("ContainerName(%q, %q) = %q, want %q", tt.alloc, tt.task, got, tt.want)
		}
	}
}

func TestIsConmonOf(t *testing.T) {
	cmd := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	tests := []struct {
		name    string
		cmdline []byte
		ref     string
		want    bool
	}{
		{"by id", cmd("/usr/bin/conmon", "--api-version", "1", "-c", "abc", "-u", "abc", "-n", "berth-x-y"), "abc", true},
		{"by name", cmd("/usr/bin/conmon", "-c", "abc", "-n", "berth-x-y"), "berth-x-y", true},
		{"other container", cmd("/usr/bin/conmon", "-c", "abc", "-n", "berth-x-y"), "abd", false},
		{"not conmon", cmd("/bin/sleep", "-c", "abc"), "abc", false},
		{"zombie", nil, "abc", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isConmonOf(tt.cmdline, tt.ref); got != tt.want {
				t.Fatalf("isConmonOf = %v, want %v", got, tt.want)
			}
		})
	}
}
