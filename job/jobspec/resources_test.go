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

// raw_exec mounts no volumes, as Nomad's: the volume_mount is a warning.
func TestRawExecVolumeMountWarns(t *testing.T) {
	for _, drv := range []string{"raw_exec", "exec"} {
		j, err := Parse([]byte(strings.Replace(volumesJob, "%s", drv, 1)), "vols.hcl", ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, w := range j.Warnings {
			if strings.Contains(w.Summary, "the raw_exec driver mounts no volumes") {
				found = w.Line == 27 && w.Column == 7
			}
		}
		if found != (drv == "raw_exec") {
			t.Errorf("%s: warning at 27:7 %v: %v", drv, found, j.Warnings)
		}
	}
}
