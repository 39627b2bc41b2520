package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/berth/berth/task/driver/podman"
)

// DefaultImage is the only image berth's podman driver can use here: there
// is no registry, it is built locally.
const DefaultImage = "localhost/busybox:latest"

// PodmanOptions configure the podman checks.
type PodmanOptions struct {
	// Binary is the podman binary ("podman" from PATH).
	Binary string
	// Sockets are the podman service sockets to try, in order
	// (DefaultPodmanSockets(DataDir)).
	Sockets []string
	// Image must be present (DefaultImage).
	Image string
	// DataDir is berth's; its podman/containers.conf is what the driver
	// runs podman with.
	DataDir string
	// ProcDir is /proc; <ProcDir>/1/comm says whether systemd is PID 1.
	ProcDir string
	Run     Runner
}

// DefaultPodmanSockets are the system service's socket, berth's and the
// one the podman driver starts under dataDir.
func DefaultPodmanSockets(dataDir string) []string {
	out := []string{"/run/podman/podman.sock", "/run/berth/podman.sock"}
	if dataDir != "" {
		out = append(out, filepath.Join(dataDir, "podman", "podman.sock"))
	}
	return out
}

// podmanInfo is the part of `podman info --format json` the checks read.
type podmanInfo struct {
	Host struct {
		CgroupManager string `json:"cgroupManager"`
		CgroupVersion string `json:"cgroupVersion"`
		EventLogger   string `json:"eventLogger"`
		OCIRuntime    struct {
			Name string `json:"name"`
		} `json:"ociRuntime"`
	} `json:"host"`
	Version struct {
		Version string `json:"Version"`
	} `json:"version"`
}

// CheckPodman checks the podman driver's needs: the binary and its
// version, a service answering on one of the sockets, podman's own
// configuration on this host, and the image.
func CheckPodman(ctx context.Context, o PodmanOptions) []Check {
	if o.Binary == "" {
		o.Binary = "podman"
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Sockets == nil {
		o.Sockets = DefaultPodmanSockets(o.DataDir)
	}
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.Run == nil {
		o.Run = ExecRunner
	}

	bin := Check{Name: "podman/binary"}
	res, err := o.Run(ctx, nil, o.Binary, "--version")
	switch {
	case err != nil:
		bin.Status = StatusWarn
		bin.Message = fmt.Sprintf("%s: %v: the podman driver cannot run tasks (the exec driver can)", o.Binary, err)
		if errors.Is(err, exec.ErrNotFound) {
			bin.Message = fmt.Sprintf("%s not found: the podman driver cannot run tasks (the exec driver can)", o.Binary)
		}
		bin.Fix = "apt-get install podman runc conmon"
		skip := "podman is not available"
		return []Check{bin,
			{Name: "podman/socket", Status: StatusSkip, Message: skip},
			{Name: "podman/config", Status: StatusSkip, Message: skip},
			{Name: "podman/image", Status: StatusSkip, Message: skip}}
	case res.ExitCode != 0:
		bin.Status = StatusWarn
		bin.Message = fmt.Sprintf("%s --version exited with %d: %s", o.Binary, res.ExitCode, firstLine(res.Stderr))
		bin.Fix = "apt-get install --reinstall podman"
	default:
		bin.Status, bin.Message = StatusOK, firstLine(res.Stdout)
	}
	berthConf := ""
	if o.DataDir != "" {
		berthConf = filepath.Join(o.DataDir, "podman", "containers.conf")
	}
	return []Check{bin, checkPodmanSocket(ctx, o.Sockets), checkPodmanConfig(ctx, o, berthConf), checkPodmanImage(ctx, o, berthConf)}
}

func checkPodmanSocket(ctx context.Context, sockets []string) Check {
	c := Check{Name: "podman/socket", Status: StatusOK}
	var tried []string
	for _, s := range sockets {
		err := podman.Ping(ctx, s)
		if err == nil {
			c.Message = fmt.Sprintf("a podman service answers on %s; berth's driver uses it when configured with that socket", s)
			return c
		}
		tried = append(tried, err.Error())
	}
	c.Message = "no podman service answers (" + strings.Join(tried, "; ") + "); berth's podman driver starts its own when it needs one"
	return c
}

func systemdIsPID1(procDir string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, "1/comm"))
	return err == nil && strings.TrimSpace(string(b)) == "systemd"
}

// checkPodmanConfig reads podman's configuration as berth's environment
// gives it: what an operator's own `podman` commands get, and what berth's
// driver has to override.
func checkPodmanConfig(ctx context.Context, o PodmanOptions, berthConf string) Check {
	c := Check{Name: "podman/config"}
	override := "berth's podman driver overrides these with its own containers.conf (runtime runc, cgroup_manager cgroupfs, events_logger file, bounded ulimits)"
	fix := "nothing for berth; for podman by hand on this host use the same settings"
	if berthConf != "" {
		fix = fmt.Sprintf("nothing for berth; for podman by hand run it with CONTAINERS_CONF=%s (written when the driver starts)", berthConf)
	}
	res, err := o.Run(ctx, nil, o.Binary, "info", "--format", "json")
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit status %d: %s", res.ExitCode, firstLine(res.Stderr))
	}
	if err != nil {
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("`podman info` fails with this host's configuration: %v; %s", err, override)
		c.Fix = fix
		return c
	}
	var info podmanInfo
	if err := json.Unmarshal(res.Stdout, &info); err != nil {
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("cannot parse `podman info --format json`: %v", err)
		c.Fix = "apt-get install --reinstall podman"
		return c
	}
	h := info.Host
	desc := fmt.Sprintf("podman %s: runtime %s, cgroup manager %s, cgroups %s, events logger %s",
		info.Version.Version, dash(h.OCIRuntime.Name), dash(h.CgroupManager), dash(h.CgroupVersion), dash(h.EventLogger))
	sysd := systemdIsPID1(o.ProcDir)
	var problems []string
	if h.CgroupVersion == "v1" && h.OCIRuntime.Name == "crun" {
		problems = append(problems, "crun refuses v1/hybrid cgroups")
	}
	if h.CgroupManager == "systemd" && !sysd {
		problems = append(problems, "the systemd cgroup manager needs systemd as PID 1, which it is not")
	}
	if h.EventLogger == "journald" && !sysd {
		problems = append(problems, "the journald events logger needs systemd's journal")
	}
	if len(problems) > 0 {
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("%s: %s; %s", desc, strings.Join(problems, "; "), override)
		c.Fix = fix
		return c
	}
	c.Status, c.Message = StatusOK, desc
	return c
}

func checkPodmanImage(ctx context.Context, o PodmanOptions, berthConf string) Check {
	c := Check{Name: "podman/image"}
	var env []string
	if berthConf != "" {
		if _, err := os.Stat(berthConf); err == nil {
			env = []string{"CONTAINERS_CONF=" + berthConf}
		}
	}
	res, err := o.Run(ctx, env, o.Binary, "image", "exists", o.Image)
	switch {
	case err != nil:
		c.Status, c.Message = StatusWarn, fmt.Sprintf("podman image exists %s: %v", o.Image, err)
		c.Fix = podman.ImageBuildScript
	case res.ExitCode == 0:
		c.Status, c.Message = StatusOK, fmt.Sprintf("image %s present", o.Image)
	case res.ExitCode == 1:
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("image %s is missing: podman tasks using it fail (berth never pulls; no registry is reachable)", o.Image)
		c.Fix = podman.ImageBuildScript
	default:
		c.Status = StatusWarn
		c.Message = fmt.Sprintf("podman image exists %s exited with %d: %s", o.Image, res.ExitCode, firstLine(res.Stderr))
		c.Fix = podman.ImageBuildScript
	}
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
