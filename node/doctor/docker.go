package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth/berth/task/driver/docker"
)

// DockerOptions configure the docker checks.
type DockerOptions struct {
	// Endpoint is the daemon's socket (the agent's docker_endpoint);
	// empty: DOCKER_HOST, then unix:///var/run/docker.sock.
	Endpoint string
	// PauseImage is the pause containers' image (docker_pause_image);
	// empty: docker.DefaultPauseImage.
	PauseImage string
	// Probe asks the daemon; nil is docker.ProbeDaemon (tests fake it).
	Probe func(ctx context.Context, endpoint, pauseImage string) (docker.Probe, error)
}

// CheckDocker checks the docker driver's needs: a daemon answering on the
// endpoint with an API version berth speaks, its storage driver, and the
// pause image of group networks. No daemon is a warning, as podman's: the
// other drivers still run.
func CheckDocker(ctx context.Context, o DockerOptions) []Check {
	probe := o.Probe
	if probe == nil {
		probe = docker.ProbeDaemon
	}
	p, err := probe(ctx, o.Endpoint, o.PauseImage)
	const fix = "bash scripts/image/docker-setup.sh (installs nothing: apt-get install docker.io first; scripts/setup.sh does both)"
	ep := Check{Name: "docker/endpoint"}
	switch {
	case errors.Is(err, docker.ErrAPIVersion):
		ep.Status, ep.Message, ep.Fix = StatusWarn, fmt.Sprintf("%s: %v", p.Endpoint, err), "upgrade Docker (Debian's docker.io 20.10 speaks API 1.41)"
	case err != nil && p.APIVersion == "":
		ep.Status, ep.Message, ep.Fix = StatusWarn, fmt.Sprintf("no Docker daemon answers at %s: the docker driver cannot run tasks (%v)", p.Endpoint, err), fix
	default:
		ep.Status, ep.Message = StatusOK, fmt.Sprintf("%s: Docker %s", p.Endpoint, p.ServerVersion)
	}
	if ep.Status != StatusOK {
		skip := "no usable Docker daemon"
		return []Check{ep,
			{Name: "docker/api", Status: StatusSkip, Message: skip},
			{Name: "docker/storage", Status: StatusSkip, Message: skip},
			{Name: "docker/pause-image", Status: StatusSkip, Message: skip}}
	}
	api := Check{Name: "docker/api", Status: StatusOK, Message: fmt.Sprintf("API %s (berth speaks %s to %s)", p.APIVersion, docker.MinAPIVersion, docker.MaxAPIVersion)}
	storage := Check{Name: "docker/storage", Status: StatusOK, Message: fmt.Sprintf("storage driver %s, cgroup driver %s", p.StorageDriver, p.CgroupDriver)}
	switch {
	case err != nil && p.StorageDriver == "":
		storage.Status, storage.Message = StatusWarn, fmt.Sprintf("GET /info: %v", err)
	case p.StorageDriver == "vfs":
		storage.Status, storage.Fix = StatusWarn, "vfs copies every image layer per container: slow starts and much disk; run dockerd on a filesystem overlay2 supports (ext4, xfs)"
	}
	pause := Check{Name: "docker/pause-image", Status: StatusOK, Message: p.PauseImage}
	switch {
	case err != nil && p.StorageDriver != "":
		pause.Status, pause.Message, pause.Fix = StatusWarn, fmt.Sprintf("%s: %v", p.PauseImage, err), fix
	case !p.PauseImagePresent:
		pause.Status, pause.Message, pause.Fix = StatusWarn, fmt.Sprintf("%s is not in Docker's local storage: docker tasks of a group with a network cannot start", p.PauseImage), fix
	}
	return []Check{ep, api, storage, pause}
}
