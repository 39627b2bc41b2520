package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewClientAddresses(t *testing.T) {
	cases := []struct {
		addr, base, err string
	}{
		{"", "http://berth-agent", ""},
		{"unix:///run/berth/berth.sock", "http://berth-agent", ""},
		{"/tmp/x.sock", "http://berth-agent", ""},
		{"unix://relative.sock", "", "absolute path"},
		{"http://127.0.0.1:4646", "http://127.0.0.1:4646", ""},
		{"http://127.0.0.1:4646/", "http://127.0.0.1:4646", ""},
		{"127.0.0.1:4646", "http://127.0.0.1:4646", ""},
		{"http://", "", "host"},
		{"nonsense", "", "unix:///"},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			c, err := NewClient(tc.addr, "")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %v, want an error mentioning %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.base != tc.base {
				t.Errorf("base %q, want %q", c.base, tc.base)
			}
		})
	}
}

// serveUnix serves h on a unix socket and returns a client of it.
func serveUnix(t *testing.T, token string, h http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := NewClient("unix://"+sock, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestClientErrors(t *testing.T) {
	c := serveUnix(t, "tok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/job/x":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"job \"x\": no such job"}`))
		case "/v1/jobs":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"a.hcl:1:1: bad","diagnostics":[{"file":"a.hcl","line":1,"column":1,"summary":"bad"}]}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream said no\n"))
		}
	})
	ctx := context.Background()
	_, err := c.Job(ctx, "x")
	if !IsNotFound(err) || !strings.Contains(err.Error(), `agent returned 404 Not Found: job "x": no such job`) {
		t.Errorf("404: %v", err)
	}
	_, err = c.SubmitJob(ctx, []byte("job"), "a.hcl")
	var ae *Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || len(ae.Diagnostics) != 1 || ae.Diagnostics[0].Line != 1 {
		t.Errorf("400 with diagnostics: %#v", err)
	}
	_, err = c.Self(ctx)
	if !errors.As(err, &ae) || ae.StatusCode != 502 || ae.Message != "upstream said no" {
		t.Errorf("non-JSON error: %v", err)
	}
}

func TestNoAgent(t *testing.T) {
	dir := t.TempDir()
	// Neither a missing socket nor a socket nobody listens on is an agent.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatal(err)
	}
	for _, sock := range []string{filepath.Join(dir, "missing.sock"), stale} {
		c, err := NewClient("unix://"+sock, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Health(context.Background()); !errors.Is(err, ErrNoAgent) {
			t.Errorf("%s: %v, want ErrNoAgent", sock, err)
		}
	}
}
