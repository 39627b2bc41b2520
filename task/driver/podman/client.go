package podman

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
	"strings"
	"time"
)

// apiPrefix is the libpod API version berth speaks; podman 4.x serves it
// and newer podman keeps accepting it.
const apiPrefix = "/v4.0.0/libpod"

var (
	// ErrNotFound is returned when podman has no container by that name or ID.
	ErrNotFound = errors.New("no such container")
	// ErrImageNotFound is returned when the task's image is not in local
	// storage; berth never pulls.
	ErrImageNotFound = errors.New("image not found")
	// ErrNameInUse is returned when a container of that name already exists.
	ErrNameInUse = errors.New("container name already in use")
)

// APIError is a non-2xx answer of the libpod API.
type APIError struct {
	Op      string // e.g. "POST /containers/create"
	Status  int
	Cause   string
	Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Cause
	}
	return fmt.Sprintf("podman API %s: %d %s", e.Op, e.Status, msg)
}

// Is maps podman's answers to the package's sentinel errors. podman reports
// a missing image and a name conflict as 500, so the cause text decides.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound && strings.Contains(e.Cause, "no such container")
	case ErrImageNotFound:
		return strings.Contains(e.Cause, "image not known") ||
			(e.Status == http.StatusNotFound && strings.Contains(e.Cause, "image"))
	case ErrNameInUse:
		return strings.Contains(e.Cause, "name is already in use")
	}
	return false
}

// client talks to one podman service over its unix socket.
type client struct {
	socket string
	http   *http.Client
	// revive, when set, brings back the service on socket after a
	// request could not even connect to it (berth's own service, killed
	// or crashed): the request is then sent once more. Only a failed
	// dial is retried, so no request that changes something reaches the
	// service twice; a GET or a DELETE (a forced removal: removing twice
	// is removing) is also retried when the service died under it,
	// because a removal that fails there leaves a container behind.
	revive func(context.Context) error
}

func newClient(socket string) *client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		// Every running task keeps one connection busy in Wait; the rest
		// are short calls that benefit from keep-alive.
		MaxIdleConns:        32,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	return &client{socket: socket, http: &http.Client{Transport: tr}}
}

// dialFailed reports whether err is a failure to connect to the socket
// (nothing listens, or the socket file is gone): the request was not sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// idempotent says whether sending a request twice does what sending it
// once does.
func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete
}

func (c *client) close() {
	c.http.CloseIdleConnections()
}

// do sends one request and decodes a JSON answer into out (if not nil).
// Statuses in okExtra count as success besides 2xx (e.g. 304 for stop).
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any, okExtra ...int) (int, error) {
	op := method + " " + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("podman API %s: encoding request: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	u := "http://podman" + apiPrefix + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	send := func() (*http.Response, error) {
		if b, ok := rd.(*bytes.Reader); ok {
			if _, err := b.Seek(0, io.SeekStart); err != nil {
				return nil, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, u, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return c.http.Do(req)
	}
	resp, err := send()
	if err != nil && c.revive != nil && ctx.Err() == nil && (dialFailed(err) || idempotent(method)) {
		if rerr := c.revive(ctx); rerr != nil {
			return 0, fmt.Errorf("podman API %s on %s: %w (and the service could not be started again: %v)", op, c.socket, err, rerr)
		}
		resp, err = send()
	}
	if err != nil {
		return 0, fmt.Errorf("podman API %s on %s: %w", op, c.socket, err)
	}
	defer resp.Body.Close()
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	for _, s := range okExtra {
		ok = ok || resp.StatusCode == s
	}
	if !ok {
		apiErr := &APIError{Op: op, Status: resp.StatusCode}
		var e struct {
			Cause   string `json:"cause"`
			Message string `json:"message"`
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &e) == nil {
			apiErr.Cause, apiErr.Message = e.Cause, e.Message
		} else {
			apiErr.Message = strings.TrimSpace(string(raw))
		}
		return resp.StatusCode, apiErr
	}
	if out != nil && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("podman API %s: decoding answer: %w", op, err)
		}
	}
	// Drain so that the connection can be reused; a failure costs only
	// that, the answer is read.
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func (c *client) ping(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/_ping", nil, nil, nil)
	return err
}

type createResponse struct {
	ID       string   `json:"Id"`
	Warnings []string `json:"Warnings"`
}

func (c *client) create(ctx context.Context, spec *specGenerator) (string, error) {
	var r createResponse
	if _, err := c.do(ctx, http.MethodPost, "/containers/create", nil, spec, &r); err != nil {
		return "", err
	}
	if r.ID == "" {
		return "", fmt.Errorf("podman API create of %s: answer has no container ID", spec.Name)
	}
	return r.ID, nil
}

func (c *client) start(ctx context.Context, id string) error {
	// 304: already running, which is what was asked.
	_, err := c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", nil, nil, nil, http.StatusNotModified)
	return err
}

// wait blocks until the container has exited and podman cleaned it up, and
// returns its exit code. interval is how often podman checks the state:
// its default (250 ms) would be most of the exit-to-teardown latency.
func (c *client) wait(ctx context.Context, id string, interval time.Duration) (int, error) {
	q := url.Values{}
	q.Set("condition", "exited")
	q.Set("interval", interval.String())
	var code int
	if _, err := c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/wait", q, nil, &code); err != nil {
		return 0, err
	}
	return code, nil
}

// inspectState is the part of the inspect answer berth uses.
type inspectState struct {
	ID    string `json:"Id"`
	Name  string `json:"Name"`
	State struct {
		Status     string    `json:"Status"`
		Running    bool      `json:"Running"`
		OOMKilled  bool      `json:"OOMKilled"`
		ExitCode   int       `json:"ExitCode"`
		Error      string    `json:"Error"`
		StartedAt  time.Time `json:"StartedAt"`
		FinishedAt time.Time `json:"FinishedAt"`
		ConmonPid  int       `json:"ConmonPid"`
	} `json:"State"`
	Config struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
}

func (c *client) inspect(ctx context.Context, id string) (*inspectState, error) {
	var r inspectState
	if _, err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/json", nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// exists asks without inspecting: inspect enters the container's network
// namespace to read interface statistics, which is what must be avoided
// right before the namespace is torn down.
func (c *client) exists(ctx context.Context, id string) (bool, error) {
	_, err := c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/exists", nil, nil, nil)
	if err == nil {
		return true, nil
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return false, nil
	}
	return false, err
}

func (c *client) stop(ctx context.Context, id string, timeout time.Duration) error {
	q := url.Values{}
	q.Set("timeout", fmt.Sprint(ceilSeconds(timeout)))
	// 304: already stopped.
	_, err := c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/stop", q, nil, nil, http.StatusNotModified)
	return err
}

// kill sends sig to the container's main process.
func (c *client) kill(ctx context.Context, id string, sig int) error {
	q := url.Values{}
	q.Set("signal", fmt.Sprint(sig))
	_, err := c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/kill", q, nil, nil)
	return err
}

type rmReport struct {
	ID  string `json:"Id"`
	Err any    `json:"Err"`
}

// remove force-removes a container, killing it at once if it still runs,
// and its anonymous volumes.
func (c *client) remove(ctx context.Context, id string) error {
	q := url.Values{}
	q.Set("force", "true")
	q.Set("v", "true")
	q.Set("timeout", "0")
	var reports []rmReport
	if _, err := c.do(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), q, nil, &reports); err != nil {
		return err
	}
	for _, r := range reports {
		if r.Err != nil && fmt.Sprint(r.Err) != "" {
			return fmt.Errorf("podman API DELETE /containers/%s: %v", id, r.Err)
		}
	}
	return nil
}

type listEntry struct {
	ID     string            `json:"Id"`
	Names  []string          `json:"Names"`
	Labels map[string]string `json:"Labels"`
	// State is "created", "running", "exited"...
	State string `json:"State"`
}

func (c *client) listByLabel(ctx context.Context, key, value string) ([]listEntry, error) {
	f, err := json.Marshal(map[string][]string{"label": {key + "=" + value}})
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("all", "true")
	q.Set("filters", string(f))
	var r []listEntry
	if _, err := c.do(ctx, http.MethodGet, "/containers/json", q, nil, &r); err != nil {
		return nil, err
	}
	return r, nil
}

// ceilSeconds rounds up so that a task never gets less grace than asked.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
