package jobspec

import (
	"errors"
	"strings"
	"testing"
)

const volumesJob = `job "vols" {
  group "g" {
    network {
      mode = "cni/nomap"
      port "http" {
        to = 8080
      }
    }
    volume "data" {
      type      = "host"
      source    = "data"
      read_only = true
    }
    volume "cache" {
      type   = "host"
      source = "cache"
    }
    volume "ebs" {
      type   = "csi"
      source = "ebs-1"
    }
    task "t" {
      driver = "%s"
      config {
        command = "/bin/true"
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`

// What the node lacks is a warning of validate at the block that asks
// for it, and Missing's refusal for run: an unconfigured host volume, a
// CSI volume, ports in a network without portmap.
func TestMissingResources(t *testing.T) {
	noMap := func(name string) error {
		if name == "nomap" {
			return errors.New(`its conflist has no portmap plugin: add {"type": "portmap", "capabilities": {"portMappings": true}} to its plugins`)
		}
		return nil
	}
	cases := []struct {
		name string
		res  NodeResources
		want []string // Kind at line:col
	}{
		{"nothing configured", NodeResources{PortMap: noMap}, []string{"host_volume 9:5", "host_volume 14:5", "csi_volume 18:5", "portmap 5:7"}},
		{"data configured", NodeResources{HostVolumes: map[string]bool{"data": true}, PortMap: noMap}, []string{"host_volume 14:5", "csi_volume 18:5", "portmap 5:7"}},
		{"all but csi", NodeResources{HostVolumes: map[string]bool{"data": true, "cache": true}, PortMap: func(string) error { return nil }}, []string{"csi_volume 18:5"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := ParseOptions{Resources: &tc.res}
			j, err := Parse([]byte(strings.Replace(volumesJob, "%s", "exec", 1)), "vols.hcl", opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range j.Missing(tc.res) {
				got = append(got, m.Kind+" "+strings.TrimPrefix(m.Pos.String(), "vols.hcl:"))
				if !errors.Is(m, ErrPlacement) {
					t.Errorf("%v does not match ErrPlacement", m)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("Missing = %v, want %v", got, tc.want)
			}
			// Each is a validate warning too (the CSI volume's is its own).
			warned := 0
			for _, w := range j.Warnings {
				if strings.Contains(w.Detail, "run refuses the job") {
					warned++
				}
			}
			if warned != len(tc.want) {
				t.Errorf("%d warnings saying run refuses, want %d: %v", warned, len(tc.want), j.Warnings)
			}
		})
	}
	j, _ := Parse([]byte(strings.Replace(volumesJob, "%s", "exec", 1)), "vols.hcl", ParseOptions{})
	m := j.Missing(NodeResources{PortMap: noMap})
	for i, want := range []string{
		`vols.hcl:9:5: host volume "data" in volume "data" in group "g" not met by this node: this node has no host volume "data": add client { host_volume "data"`,
		`vols.hcl:18:5: CSI volume "ebs-1" in volume "ebs" in group "g" not met by this node: berth has no CSI plugins`,
		`vols.hcl:5:7: port "http" in network block in group "g" not met by this node: network mode "cni/nomap" cannot map ports: its conflist has no portmap plugin`,
	} {
		idx := []int{0, 2, 3}[i]
		if !strings.HasPrefix(m[idx].Error(), want) {
			t.Errorf("refusal %d = %v\nwant prefix %s", idx, m[idx], want)
		}
	}
}

// raw_exec cannot mount a host volume: Nomad's validate accepts the job
// and its task fails at start ("does not support host volumes"). So
// berth's validate warns at the volume_mount and run refuses there.
func TestRawExecVolumeMount(t *testing.T) {
	for _, tc := range []struct {
		drv               string
		validate, refused bool
	}{{"raw_exec", true, true}, {"exec", false, false}} {
		t.Run(tc.drv, func(t *testing.T) {
			src := []byte(strings.Replace(volumesJob, "%s", tc.drv, 1))
			j, err := Parse(src, "vols.hcl", ParseOptions{NodeWarnings: true})
			if err != nil {
				t.Fatal(err)
			}
			warned := false
			for _, w := range j.Warnings {
				if strings.Contains(w.Summary, "the raw_exec driver does not support host volumes") {
					warned = w.Line == 27 && w.Column == 7 && strings.Contains(w.Detail, "run and plan refuse it")
				}
			}
			if warned != tc.validate {
				t.Errorf("validate warns at 27:7: %v, want %v: %v", warned, tc.validate, j.Warnings)
			}
			_, err = Parse(src, "vols.hcl", ParseOptions{})
			want := `vols.hcl:27:7: volume_mount of volume "data" in task "t": the raw_exec driver does not support host volumes`
			if refused := err != nil && strings.HasPrefix(err.Error(), want); refused != tc.refused {
				t.Errorf("run: %v, want refused %v (%s)", err, tc.refused, want)
			}
		})
	}
}

// per_alloc: allocation N of the group mounts the node's host volume
// "<source>[N]", as Nomad's; the node must have one for each allocation.
func TestPerAllocSources(t *testing.T) {
	src := `job "j" {
  group "g" {
    count = 3
    volume "v" {
      type      = "host"
      source    = "data"
      per_alloc = true
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
`
	j, err := Parse([]byte(src), "pa.hcl", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := j.Groups[0].Volumes["v"]
	if got := strings.Join(v.Sources(3), ","); got != "data[0],data[1],data[2]" {
		t.Errorf("Sources = %s", got)
	}
	m := j.Missing(NodeResources{HostVolumes: map[string]bool{"data[0]": true, "data[2]": true, "data": true}})
	if len(m) != 1 || !strings.HasPrefix(m[0].Error(), `pa.hcl:4:5: host volume "data[1]" in volume "v" in group "g" not met by this node`) {
		t.Errorf("Missing = %v, want data[1] only", m)
	}
	v.PerAlloc = false
	if got := v.SourceFor(2); got != "data" {
		t.Errorf("SourceFor without per_alloc = %s", got)
	}
}
