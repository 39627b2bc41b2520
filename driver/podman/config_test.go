package podman

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     map[string]any
		want    *TaskConfig
		wantErr string // exact message when set
		errHas  string // substring when set
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
			name:   "args with a number",
			cfg:    map[string]any{"image": "busybox", "args": []any{"-c", 3}},
			errHas: "podman: config.args must be a list of strings",
		},
		{
			name:   "unknown key",
			cfg:    map[string]any{"image": "busybox", "port_map": 1, "volumes": []any{}},
			errHas: "config.port_map, config.volumes (known: args, command, entrypoint, hostname, image, labels, working_dir)",
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
				Labels: map[string]string{"a": "1", "b": "2"},
			},
		},
		{
			name: "typed lists",
			cfg:  map[string]any{"image": "busybox", "args": []string{"x"}, "entrypoint": []any{"/bin/sh", "-c"}, "labels": map[string]string{"k": "v"}},
			want: &TaskConfig{Image: "busybox", Args: []string{"x"}, Entrypoint: []string{"/bin/sh", "-c"}, Labels: map[string]string{"k": "v"}},
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
			if tt.errHas != "" && !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("error = %q, want it to contain %q", err, tt.errHas)
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
