package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoAgent is matched (errors.Is) when nothing answers at the address:
// no socket file, connection refused. Callers that can work without an
// agent (berth gc, berth netns ls) fall back to local then.
var ErrNoAgent = errors.New("no berth agent answers")

// Error is an error the agent returned: the HTTP status and its message.
type Error struct {
	StatusCode int
	Message    string
	// Diagnostics are set when a submitted job file did not parse.
	Diagnostics []Diagnostic
}

func (e *Error) Error() string {
	return fmt.Sprintf("agent returned %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// IsNotFound reports whether err is the agent's 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}

// Client talks to one agent.
type Client struct {
	addr  string
	base  string
	token string
	hc    *http.Client
}

// ClientOptions are how a client authenticates to an agent and checks
// it. The zero value sends no token and trusts the system's CAs.
type ClientOptions struct {
	// Token is sent as a bearer token when not empty; the agent requires
	// it on TCP.
	Token string
	// CACert is a PEM file of the CA(s) that sign the agent's certificate
	// (an https:// address); empty trusts the system's CAs.
	CACert string
	// ClientCert and ClientKey are a PEM certificate and key presented to
	// an agent that asks for client certificates.
	ClientCert, ClientKey string
	// TLSServerName is the name the agent's certificate must carry, when
	// it is not the address's host.
	TLSServerName string
}

// OptionsFromEnv are the options the environment gives: BERTH_TOKEN (or
// the file BERTH_TOKEN_FILE names), BERTH_CACERT, BERTH_CLIENT_CERT,
// BERTH_CLIENT_KEY and BERTH_TLS_SERVER_NAME.
func OptionsFromEnv() (ClientOptions, error) {
	o := ClientOptions{
		Token: os.Getenv(EnvToken), CACert: os.Getenv(EnvCACert),
		ClientCert: os.Getenv(EnvClientCert), ClientKey: os.Getenv(EnvClientKey), TLSServerName: os.Getenv(EnvTLSServerName),
	}
	if f := os.Getenv(EnvTokenFile); f != "" && o.Token == "" {
		t, err := ReadTokenFile(f)
		if err != nil {
			return o, err
		}
		o.Token = t
	}
	return o, nil
}

// ReadTokenFile reads a bearer token from a file (surrounding white space
// is ignored), so that it never has to be on a command line.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("read token file %s: %w", path, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return t, nil
}

// NewClient returns a client of the agent at address: "unix:///path" or an
// absolute socket path, or "http://host:port" or "https://host:port" (a
// bare "host:port" means http). token is sent as a bearer token when not
// empty; the agent requires it on TCP.
func NewClient(address, token string) (*Client, error) {
	return NewClientWithOptions(address, ClientOptions{Token: token})
}

// NewClientWithOptions is NewClient with TLS settings, which an https://
// address uses (any other ignores them, as Nomad's CLI does).
func NewClientWithOptions(address string, o ClientOptions) (*Client, error) {
	if address == "" {
		address = DefaultAddress
	}
	c := &Client{addr: address, token: o.Token}
	switch {
	case strings.HasPrefix(address, "unix://") || strings.HasPrefix(address, "/"):
		path := strings.TrimPrefix(address, "unix://")
		if path == "" || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("agent address %q: a unix socket needs an absolute path, e.g. %s", address, DefaultAddress)
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			},
			DisableCompression: true,
		}
		c.hc = &http.Client{Transport: tr}
		// The host is never resolved; it only has to be valid.
		c.base = "http://berth-agent"
	case strings.HasPrefix(address, "http://") || strings.HasPrefix(address, "https://"):
		u, err := url.Parse(address)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("agent address %q: not a URL with a host", address)
		}
		c.base = strings.TrimSuffix(u.String(), "/")
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if u.Scheme == "https" {
			tc, err := o.tlsConfig()
			if err != nil {
				return nil, fmt.Errorf("agent address %q: %w", address, err)
			}
			tr.TLSClientConfig = tc
		}
		c.hc = &http.Client{Transport: tr}
	default:
		if _, _, err := net.SplitHostPort(address); err != nil {
			return nil, fmt.Errorf("agent address %q: use unix:///path/to/berth.sock or http://host:port", address)
		}
		c.base = "http://" + address
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return c, nil
}

// Address is the address the client was made with.
func (c *Client) Address() string { return c.addr }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Do sends a request and returns the response as is, whatever its status
// (for tests and for routes without a typed method). A nil body sends none.
func (c *Client) Do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("agent request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if isNoAgent(err) {
			return nil, fmt.Errorf("%w at %s: %v", ErrNoAgent, c.addr, err)
		}
		return nil, fmt.Errorf("agent at %s: %s %s: %w", c.addr, method, path, err)
	}
	return resp, nil
}

func isNoAgent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// call sends in (JSON, unless nil) and decodes a 2xx answer into out
// (unless nil); any other status becomes an *Error.
func (c *Client) call(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.Do(ctx, method, path, body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := checkStatus(resp); err != nil {
		return resp.StatusCode, err
	}
	if out == nil {
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("agent at %s: decode answer to %s %s: %w", c.addr, method, path, err)
	}
	return resp.StatusCode, nil
}

func checkStatus(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes))
	var er ErrorResponse
	if json.Unmarshal(b, &er) != nil || er.Error == "" {
		er.Error = strings.TrimSpace(string(b))
		if er.Error == "" {
			er.Error = http.StatusText(resp.StatusCode)
		}
	}
	return &Error{StatusCode: resp.StatusCode, Message: er.Error, Diagnostics: er.Diagnostics}
}

// Health asks whether the agent runs; a draining agent is an *Error 503.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	_, err := c.call(ctx, http.MethodGet, "/v1/health", nil, &h)
	return &h, err
}

// Drain asks the agent to stop every job, tear their networks down and
// exit; it returns once the agent has accepted (see WaitGone).
func (c *Client) Drain(ctx context.Context) (*DrainResponse, error) {
	var d DrainResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/agent/drain", nil, &d)
	return &d, err
}

// DrainWait asks the agent to drain and returns once the drain is done
// (DrainResponse.Done), with what it stopped; the agent process exits
// right after.
func (c *Client) DrainWait(ctx context.Context) (*DrainResponse, error) {
	var d DrainResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/agent/drain?wait=true", nil, &d)
	return &d, err
}

// Self describes the agent and its configuration.
func (c *Client) Self(ctx context.Context) (*AgentSelf, error) {
	var s AgentSelf
	_, err := c.call(ctx, http.MethodGet, "/v1/agent/self", nil, &s)
	return &s, err
}

// SubmitJob submits a job file's text; filename is used in error positions.
func (c *Client) SubmitJob(ctx context.Context, src []byte, filename string) (*JobSubmitResponse, error) {
	return c.Submit(ctx, JobSubmitRequest{JobHCL: string(src), Filename: filename})
}

// Submit submits a job with its variables.
func (c *Client) Submit(ctx context.Context, req JobSubmitRequest) (*JobSubmitResponse, error) {
	var r JobSubmitResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/jobs", req, &r)
	return &r, err
}

// PlanJob parses a job file and says what submitting it would do, without
// doing it.
func (c *Client) PlanJob(ctx context.Context, src []byte, filename string) (*JobPlanResponse, error) {
	return c.Plan(ctx, JobSubmitRequest{JobHCL: string(src), Filename: filename})
}

// Plan is PlanJob for a job with its variables.
func (c *Client) Plan(ctx context.Context, req JobSubmitRequest) (*JobPlanResponse, error) {
	var r JobPlanResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/jobs/plan", req, &r)
	return &r, err
}

// DispatchJob dispatches the parameterized job id with meta and payload.
func (c *Client) DispatchJob(ctx context.Context, id string, req JobDispatchRequest) (*JobDispatchResponse, error) {
	var r JobDispatchResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/job/"+url.PathEscape(id)+"/dispatch", req, &r)
	return &r, err
}

// Jobs lists the jobs the agent knows.
func (c *Client) Jobs(ctx context.Context) ([]JobStub, error) {
	var r []JobStub
	_, err := c.call(ctx, http.MethodGet, "/v1/jobs", nil, &r)
	return r, err
}

// Job returns a job's status and its allocations.
func (c *Client) Job(ctx context.Context, id string) (*JobStatus, error) {
	var r JobStatus
	_, err := c.call(ctx, http.MethodGet, "/v1/job/"+url.PathEscape(id), nil, &r)
	return &r, err
}

// StopJob stops a job (its tasks and networks); it stays known as dead
// until purged (StopJobWith).
func (c *Client) StopJob(ctx context.Context, id string) (*JobStopResponse, error) {
	return c.StopJobWith(ctx, id, JobStopOptions{})
}

// StopJobWith stops a job with options: purge forgets it once stopped,
// detach answers without waiting.
func (c *Client) StopJobWith(ctx context.Context, id string, o JobStopOptions) (*JobStopResponse, error) {
	q := url.Values{}
	if o.Purge {
		q.Set("purge", "true")
	}
	if o.Detach {
		q.Set("detach", "true")
	}
	path := "/v1/job/" + url.PathEscape(id)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var r JobStopResponse
	_, err := c.call(ctx, http.MethodDelete, path, nil, &r)
	return &r, err
}

// JobVersions lists the versions the agent keeps of a job, newest first.
func (c *Client) JobVersions(ctx context.Context, id string) (*JobVersions, error) {
	var r JobVersions
	_, err := c.call(ctx, http.MethodGet, "/v1/job/"+url.PathEscape(id)+"/versions", nil, &r)
	return &r, err
}

// Allocations lists allocations, newest first; job "" means all jobs.
func (c *Client) Allocations(ctx context.Context, job string) ([]AllocStub, error) {
	path := "/v1/allocations"
	if job != "" {
		path += "?job=" + url.QueryEscape(job)
	}
	var r []AllocStub
	_, err := c.call(ctx, http.MethodGet, path, nil, &r)
	return r, err
}

// Allocation returns one allocation; id may be a unique prefix.
func (c *Client) Allocation(ctx context.Context, id string) (*Allocation, error) {
	var r Allocation
	_, err := c.call(ctx, http.MethodGet, "/v1/allocation/"+url.PathEscape(id), nil, &r)
	return &r, err
}

// AllocLogs returns a task's stdout (or stderr), the last tail bytes of it
// when tail > 0.
func (c *Client) AllocLogs(ctx context.Context, allocID, task string, stderr bool, tail int64) ([]byte, error) {
	var b bytes.Buffer
	if err := c.StreamAllocLogs(ctx, allocID, task, LogsOptions{Stderr: stderr, TailBytes: tail}, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// LogsOptions choose what of a task's log StreamAllocLogs reads.
type LogsOptions struct {
	Stderr bool
	// TailBytes (> 0) starts that many bytes before the end, TailLines
	// (> 0) that many lines before it; not both.
	TailBytes int64
	TailLines int
	// Follow keeps reading what the task writes, across log rotation,
	// until the task is dead and its log read to the end (or ctx ends).
	Follow bool
}

// StreamAllocLogs copies a task's log to w as the agent sends it.
func (c *Client) StreamAllocLogs(ctx context.Context, allocID, task string, o LogsOptions, w io.Writer) error {
	q := url.Values{}
	if o.Stderr {
		q.Set("type", "stderr")
	}
	if o.TailBytes > 0 {
		q.Set("tail", strconv.FormatInt(o.TailBytes, 10))
	}
	if o.TailLines > 0 {
		q.Set("lines", strconv.Itoa(o.TailLines))
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	path := "/v1/allocation/" + url.PathEscape(allocID) + "/logs/" + url.PathEscape(task)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkStatus(resp); err != nil {
		return err
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("agent at %s: read logs of %s/%s: %w", c.addr, allocID, task, err)
	}
	return nil
}

// StopAlloc stops one allocation (its tasks, its network); a service or
// system job's runner replaces it.
func (c *Client) StopAlloc(ctx context.Context, allocID string) (*AllocStopResponse, error) {
	var r AllocStopResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/allocation/"+url.PathEscape(allocID)+"/stop", nil, &r)
	return &r, err
}

// RestartAlloc restarts an allocation's running tasks in place (task ""
// is all of them).
func (c *Client) RestartAlloc(ctx context.Context, allocID, task string) (*AllocRestartResponse, error) {
	path := "/v1/allocation/" + url.PathEscape(allocID) + "/restart"
	if task != "" {
		path += "?task=" + url.QueryEscape(task)
	}
	var r AllocRestartResponse
	_, err := c.call(ctx, http.MethodPost, path, nil, &r)
	return &r, err
}

// SignalAlloc sends a signal ("SIGUSR1", "USR1" or a number) to the main
// process of an allocation's running tasks (task "" is all of them).
func (c *Client) SignalAlloc(ctx context.Context, allocID, task, signal string) (*AllocSignalResponse, error) {
	q := url.Values{}
	q.Set("signal", signal)
	if task != "" {
		q.Set("task", task)
	}
	var r AllocSignalResponse
	_, err := c.call(ctx, http.MethodPost, "/v1/allocation/"+url.PathEscape(allocID)+"/signal?"+q.Encode(), nil, &r)
	return &r, err
}

// Namespaces lists the namespaces of the agent's netns dir with their
// holders.
func (c *Client) Namespaces(ctx context.Context) ([]NetnsEntry, error) {
	var r []NetnsEntry
	_, err := c.call(ctx, http.MethodGet, "/v1/namespaces", nil, &r)
	return r, err
}

// GC runs garbage collection in the agent now.
func (c *Client) GC(ctx context.Context, req GCRequest) (*GCReport, error) {
	q := url.Values{}
	if req.DryRun {
		q.Set("dry_run", "true")
	}
	for _, p := range req.ForeignPrefixes {
		q.Add("foreign_prefix", p)
	}
	for _, n := range req.ForeignNetworks {
		q.Add("foreign_network", n)
	}
	path := "/v1/gc"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var r GCReport
	_, err := c.call(ctx, http.MethodPost, path, nil, &r)
	return &r, err
}

// Metrics returns the agent's Prometheus metrics in the text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.Do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if err := checkStatus(resp); err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (o ClientOptions) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.TLSServerName}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s holds no PEM certificate", o.CACert)
		}
		tc.RootCAs = pool
	}
	if (o.ClientCert == "") != (o.ClientKey == "") {
		return nil, fmt.Errorf("a client certificate needs both its certificate (%q) and its key (%q)", o.ClientCert, o.ClientKey)
	}
	if o.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
