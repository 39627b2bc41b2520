package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
)

// Host volumes come from the file's client { host_volume "name" { ... } }
// blocks or from --client-host-volume NAME=PATH[:ro] (which replaces the
// file's, as any flag wins over the file); the runner gets them by name.
func TestHostVolumeSettings(t *testing.T) {
	dir := t.TempDir()
	c := Default()
	src := `client {
  host_volume "data" {
    path = "` + dir + `"
  }
  host_volume "conf" {
    path      = "/etc"
    read_only = true
  }
}
`
	if err := DecodeHCL([]byte(src), "f.hcl", &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := c.RunnerHostVolumes()
	if len(got) != 2 || got["data"] != (runner.HostVolume{Path: dir}) || got["conf"] != (runner.HostVolume{Path: "/etc", ReadOnly: true}) {
		t.Errorf("from the file: %+v", got)
	}
	if c.Client.MaxAllocs != DefaultMaxAllocs {
		t.Errorf("the client block lost its defaults: %+v", c.Client)
	}

	dup := "client {\n  host_volume \"a\" {\n    path = \"/x\"\n  }\n  host_volume \"a\" {\n    path = \"/y\"\n  }\n}\n"
	if err := DecodeHCL([]byte(dup), "f.hcl", new(Config)); err == nil || !strings.Contains(err.Error(), `f.hcl:5:3: Duplicate host_volume "a" block`) {
		t.Errorf("duplicate: %v", err)
	}
	if err := DecodeHCL([]byte("client {\n  host_volume {\n  }\n}\n"), "f.hcl", new(Config)); err == nil {
		t.Error("a host_volume without a name was accepted")
	}

	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	flags := Default()
	nf := BindFlags(fs, &flags)
	if err := fs.Parse([]string{"--client-host-volume", "logs=" + dir + ":ro", "--client-host-volume", "tmp=/tmp"}); err != nil {
		t.Fatal(err)
	}
	nf.Overlay(&c)
	got = c.RunnerHostVolumes()
	if len(got) != 2 || got["logs"] != (runner.HostVolume{Path: dir, ReadOnly: true}) || got["tmp"] != (runner.HostVolume{Path: "/tmp"}) {
		t.Errorf("from the flags: %+v", got)
	}
	if err := fs.Parse([]string{"--client-host-volume", "nopath"}); err == nil {
		t.Error("--client-host-volume nopath was accepted")
	}
}

func TestHostVolumeValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		vols []*HostVolume
		want string
	}{
		{"relative", []*HostVolume{{Name: "a", Path: "rel"}}, `client.host_volume (--client-host-volume) "a": path "rel" must be absolute`},
		{"missing", []*HostVolume{{Name: "a", Path: "/nonexistent/btnode-vol"}}, "no such file or directory"},
		{"twice", []*HostVolume{{Name: "a", Path: "/tmp"}, {Name: "a", Path: "/tmp"}}, `"a" is configured twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Client.HostVolumes = tc.vols
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// The node's resources: its host volumes by name, and CNI networks whose
// conflist has no portmap plugin cannot map ports.
func TestResources(t *testing.T) {
	confDir := t.TempDir()
	for name, plugins := range map[string]string{
		"btnode-map":   `[{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]`,
		"btnode-nomap": `[{"type": "bridge"}]`,
	} {
		conf := `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": ` + plugins + `}`
		if err := os.WriteFile(filepath.Join(confDir, name+".conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := Default()
	c.CNIConfigDir = confDir
	c.Client.HostVolumes = []*HostVolume{{Name: "data", Path: "/tmp"}}
	n, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := n.Resources(context.Background())
	if !r.HostVolumes["data"] || r.HostVolumes["other"] {
		t.Errorf("HostVolumes = %v", r.HostVolumes)
	}
	if err := r.PortMap("btnode-map"); err != nil {
		t.Errorf("btnode-map: %v", err)
	}
	if err := r.PortMap("btnode-absent"); err != nil {
		t.Errorf("an absent network is the network check's: %v", err)
	}
	err = r.PortMap("btnode-nomap")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(confDir, "btnode-nomap.conflist")+" has no portmap plugin: add") {
		t.Errorf("btnode-nomap: %v", err)
	}
	job, err := jobspec.Parse([]byte(`job "j" {
  group "g" {
    network {
      mode = "cni/btnode-nomap"
      port "http" {
        static = 8080
      }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`), "j.hcl", n.ParseOptions(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	if len(job.Warnings) != 1 || !strings.Contains(job.Warnings[0].String(), `j.hcl:5:7: port "http" in network block in group "g" is not offered by this node`) {
		t.Errorf("validate's warnings: %v", job.Warnings)
	}
	err = n.Place(context.Background(), job)
	if err == nil || !strings.Contains(err.Error(), `j.hcl:5:7: port "http"`) || !strings.Contains(err.Error(), `network mode "cni/btnode-nomap" cannot map ports`) {
		t.Errorf("Place = %v", err)
	}
}
