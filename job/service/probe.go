package service

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/berth/berth/network/netns"
	"github.com/berth/berth/store"
)

// Probe is one check's request: what Run does at each interval.
type Probe struct {
	Type   string // "http" or "tcp"
	Target Target
	// http: Protocol "http" (default) or "https", Path (with a query),
	// Method (GET), Header, Body, TLSSkipVerify, TLSServerName.
	Protocol      string
	Path          string
	Method        string
	Header        map[string][]string
	Body          string
	TLSSkipVerify bool
	TLSServerName string
}

// maxOutput bounds the body kept as a check's output.
const maxOutput = 512

// dialer dials from the host, or from inside the target's namespace:
// the socket is made there (the connection then belongs to it), the rest
// of the exchange happens on any thread.
func dialer(t Target, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if t.NetnsPath == "" {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.WithPath(t.NetnsPath, func() error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// Run runs the probe once within timeout and returns the status it saw
// (passing, warning, critical) and what it says. An http check passes on
// a 2xx status, warns on 429 Too Many Requests, as Consul's, and is
// critical on anything else; a tcp check passes when it connects.
func (p *Probe) Run(ctx context.Context, timeout time.Duration) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := dialer(p.Target, timeout)
	addr := p.Target.HostPort()
	switch p.Type {
	case "tcp":
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			return store.CheckCritical, fmt.Sprintf("TCP connect %s: %v", addr, err)
		}
		c.Close()
		return store.CheckPassing, fmt.Sprintf("TCP connect %s: Success", addr)
	case "http":
		return p.http(ctx, dial, addr, timeout)
	}
	return store.CheckCritical, fmt.Sprintf("check type %q is not run by berth's native provider", p.Type)
}

func (p *Probe) url(addr string) string {
	proto := p.Protocol
	if proto == "" {
		proto = "http"
	}
	path := p.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u := url.URL{Scheme: proto, Host: addr}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		u.Path, u.RawQuery = path[:i], path[i+1:]
	} else {
		u.Path = path
	}
	return u.String()
}

func (p *Probe) http(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), addr string, timeout time.Duration) (string, string) {
	method := p.Method
	if method == "" {
		method = http.MethodGet
	}
	u := p.url(addr)
	var body io.Reader
	if p.Body != "" {
		body = strings.NewReader(p.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return store.CheckCritical, fmt.Sprintf("HTTP %s %s: %v", method, u, err)
	}
	for k, vs := range p.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "berth health check")
	}
	// One transport per run: it dials from the right namespace and keeps
	// no connection (a check must see a fresh connect, as Consul's).
	tr := &http.Transport{
		DialContext:           dial,
		DisableKeepAlives:     true,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: p.TLSSkipVerify, ServerName: p.TLSServerName}, //nolint:gosec // the job asks for it
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: timeout}).Do(req)
	if err != nil {
		return store.CheckCritical, fmt.Sprintf("HTTP %s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxOutput))
	out := fmt.Sprintf("HTTP %s %s: %s", method, u, resp.Status)
	if s := strings.TrimSpace(strings.ToValidUTF8(string(b), "")); s != "" {
		out += " Output: " + s
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return store.CheckPassing, out
	case resp.StatusCode == http.StatusTooManyRequests:
		return store.CheckWarning, out
	}
	return store.CheckCritical, out
}
