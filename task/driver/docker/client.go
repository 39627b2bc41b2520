package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Errors of the Engine API that the driver acts on.
var (
	ErrNotFound      = errors.New("no such object")
	ErrNameInUse     = errors.New("container name already in use")
	ErrImageNotFound = errors.New("image not in Docker's local storage")
	// ErrAPIVersion is a daemon older than the oldest API berth speaks.
	ErrAPIVersion = errors.New("docker API version too old")
)

// APIError is an answer of the daemon that is not a success.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("docker API %d: %s", e.Status, e.Message) }

// MinAPIVersion and MaxAPIVersion bound the API version berth negotiates:
// 1.40 is Docker 19.03, 1.41 Debian's 20.10; a newer daemon is spoken to
// in 1.41, which every later engine still serves.
const (
	MinAPIVersion = "1.40"
	MaxAPIVersion = "1.41"
)

// client speaks the Docker Engine API over a unix socket.
type client struct {
	hc      *http.Client
	version string // negotiated, e.g. "1.41"
}

// DefaultEndpoint is Docker's socket (DOCKER_HOST unset).
const DefaultEndpoint = "unix:///var/run/docker.sock"

// socketPath turns an endpoint (unix:///path or /path) into the path.
func socketPath(endpoint string) (string, error) {
	switch {
	case endpoint == "":
		return socketPath(DefaultEndpoint)
	case strings.HasPrefix(endpoint, "unix://"):
		return strings.TrimPrefix(endpoint, "unix://"), nil
	case strings.HasPrefix(endpoint, "/"):
		return endpoint, nil
	}
	return "", fmt.Errorf("docker endpoint %q: only a unix socket (unix:///path) is supported: berth talks to this node's dockerd only", endpoint)
}

func newClient(socket string) *client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
	}
	return &client{hc: &http.Client{Transport: tr}, version: MaxAPIVersion}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// Version is what GET /version says.
type Version struct {
	Version    string `json:"Version"`
	APIVersion string `json:"ApiVersion"`
	MinAPI     string `json:"MinAPIVersion"`
}

// negotiate asks the daemon's API version and speaks the lower of it and
// MaxAPIVersion; below MinAPIVersion is ErrAPIVersion.
func (c *client) negotiate(ctx context.Context) (Version, error) {
	var v Version
	if err := c.do(ctx, http.MethodGet, "/version", nil, nil, &v, false); err != nil {
		return v, err
	}
	switch {
	case v.APIVersion == "":
		return v, fmt.Errorf("daemon %s states no API version: %w", v.Version, ErrAPIVersion)
	case versionLess(v.APIVersion, MinAPIVersion):
		return v, fmt.Errorf("daemon %s speaks API %s, berth needs %s or later: %w", v.Version, v.APIVersion, MinAPIVersion, ErrAPIVersion)
	case versionLess(v.APIVersion, MaxAPIVersion):
		c.version = v.APIVersion
	default:
		c.version = MaxAPIVersion
	}
	return v, nil
}

// versionLess compares "1.40" style versions.
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// do sends a request; body is JSON-encoded when not nil, the answer decoded
// into out when not nil. versioned prefixes the negotiated version.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any, versioned ...bool) error {
	resp, err := c.send(ctx, method, path, query, body, len(versioned) == 0 || versioned[0])
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func (c *client) send(ctx context.Context, method, path string, query url.Values, body any, versioned bool, header ...string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://docker" + path
	if versioned {
		u = "http://docker/v" + c.version + path
	}
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	defer resp.Body.Close()
	var m struct {
		Message string `json:"message"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &m) != nil || m.Message == "" {
		m.Message = strings.TrimSpace(string(raw))
	}
	apiErr := &APIError{Status: resp.StatusCode, Message: m.Message}
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.Contains(m.Message, "No such image"):
		return nil, fmt.Errorf("%w: %w", ErrImageNotFound, apiErr)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %w", ErrNotFound, apiErr)
	case resp.StatusCode == http.StatusConflict && strings.Contains(m.Message, "is already in use"):
		return nil, fmt.Errorf("%w: %w", ErrNameInUse, apiErr)
	}
	return nil, apiErr
}

// Info is the part of GET /info berth reports.
type Info struct {
	Driver        string `json:"Driver"`
	CgroupDriver  string `json:"CgroupDriver"`
	CgroupVersion string `json:"CgroupVersion"`
	ServerVersion string `json:"ServerVersion"`
	DockerRootDir string `json:"DockerRootDir"`
}

func (c *client) info(ctx context.Context) (Info, error) {
	var i Info
	err := c.do(ctx, http.MethodGet, "/info", nil, nil, &i)
	return i, err
}

func (c *client) create(ctx context.Context, name string, cfg *containerConfig) (string, error) {
	var out struct {
		ID string `json:"Id"`
	}
	if err := c.do(ctx, http.MethodPost, "/containers/create", url.Values{"name": {name}}, cfg, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

func (c *client) start(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// inspectResult is the part of GET /containers/{id}/json berth reads.
type inspectResult struct {
	ID      string `json:"Id"`
	Name    string `json:"Name"`
	LogPath string `json:"LogPath"`
	State   struct {
		Status     string    `json:"Status"`
		Running    bool      `json:"Running"`
		Pid        int       `json:"Pid"`
		ExitCode   int       `json:"ExitCode"`
		OOMKilled  bool      `json:"OOMKilled"`
		StartedAt  time.Time `json:"StartedAt"`
		FinishedAt time.Time `json:"FinishedAt"`
	} `json:"State"`
	Config struct {
		Labels     map[string]string `json:"Labels"`
		StopSignal string            `json:"StopSignal"`
		Env        []string          `json:"Env"`
		Cmd        []string          `json:"Cmd"`
		Entrypoint []string          `json:"Entrypoint"`
		WorkingDir string            `json:"WorkingDir"`
		Hostname   string            `json:"Hostname"`
		User       string            `json:"User"`
		Tty        bool              `json:"Tty"`
		OpenStdin  bool              `json:"OpenStdin"`
		Image      string            `json:"Image"`
	} `json:"Config"`
	HostConfig hostConfig `json:"HostConfig"`
	Mounts     []struct {
		Type        string `json:"Type"`
		Source      string `json:"Source"`
		Destination string `json:"Destination"`
		RW          bool   `json:"RW"`
	} `json:"Mounts"`
}

func (c *client) inspect(ctx context.Context, ref string) (*inspectResult, error) {
	var r inspectResult
	if err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(ref)+"/json", nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// imageExists asks whether ref is in local storage.
func (c *client) imageExists(ctx context.Context, ref string) (bool, error) {
	err := c.do(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, nil)
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrImageNotFound) {
		return false, nil
	}
	return err == nil, err
}

// pull pulls ref (force_pull, or an image not in local storage) with
// registryAuth (X-Registry-Auth, base64 JSON; "" none); the stream's
// error message, if any, is the error.
func (c *client) pull(ctx context.Context, ref, registryAuth string) error {
	q := url.Values{"fromImage": {ref}}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") && !strings.Contains(ref, "@") {
		q.Set("tag", "latest")
	}
	var hdr []string
	if registryAuth != "" {
		hdr = []string{"X-Registry-Auth", registryAuth}
	}
	resp, err := c.send(ctx, http.MethodPost, "/images/create", q, nil, true, hdr...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// listEntry is one container of GET /containers/json.
type listEntry struct {
	ID     string            `json:"Id"`
	Names  []string          `json:"Names"`
	State  string            `json:"State"`
	Labels map[string]string `json:"Labels"`
}

// listByLabel lists all containers (running or not) with label key=value.
func (c *client) listByLabel(ctx context.Context, key, value string) ([]listEntry, error) {
	f, _ := json.Marshal(map[string][]string{"label": {key + "=" + value}})
	var out []listEntry
	err := c.do(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(f)}}, nil, &out)
	return out, err
}

// kill sends sig to the container's main process.
func (c *client) kill(ctx context.Context, id string, sig int) error {
	return c.do(ctx, http.MethodPost, "/containers/"+id+"/kill", url.Values{"signal": {strconv.Itoa(sig)}}, nil, nil)
}

// stop sends the container's stop signal, SIGKILL after timeout (whole
// seconds, rounded up). A stopped container is not an error.
func (c *client) stop(ctx context.Context, id string, timeout time.Duration) error {
	q := url.Values{"t": {strconv.Itoa(ceilSeconds(timeout))}}
	return c.do(ctx, http.MethodPost, "/containers/"+id+"/stop", q, nil, nil)
}

// remove force-removes the container and its anonymous volumes.
func (c *client) remove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
}

// wait blocks until the container is not running.
func (c *client) wait(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/containers/"+id+"/wait", url.Values{"condition": {"not-running"}}, nil, &struct{}{})
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
