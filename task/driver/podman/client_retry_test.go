package podman

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// A service that dies under a request: a removal (DELETE) is sent again
// once the service is back, since removing twice is removing; a request
// that changes something otherwise (POST) is not, since it may have been
// carried out.
func TestRetryAfterServiceDied(t *testing.T) {
	for _, tc := range []struct {
		method  string
		retried bool
	}{
		{http.MethodDelete, true},
		{http.MethodGet, true},
		{http.MethodPost, false},
	} {
		t.Run(tc.method, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "p.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					// The service dies mid-request: the connection drops
					// with no answer.
					c, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						c.Close()
					}
					return
				}
				w.WriteHeader(http.StatusOK)
			})}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { srv.Close() })

			c := newClient(sock)
			defer c.close()
			var revived atomic.Int32
			c.revive = func(context.Context) error { revived.Add(1); return nil }
			_, err = c.do(context.Background(), tc.method, "/containers/x", nil, nil, nil)
			if tc.retried && (err != nil || revived.Load() != 1 || calls.Load() != 2) {
				t.Errorf("%s: err %v, revived %d, calls %d: want sent again once after a revive", tc.method, err, revived.Load(), calls.Load())
			}
			if !tc.retried && (err == nil || calls.Load() != 1) {
				t.Errorf("%s: err %v, calls %d: want the error, not a second request", tc.method, err, calls.Load())
			}
		})
	}
}

// A start that got no answer (the service died under it, as the chaos
// suite makes it) is asked about: a container that ran is supervised, not
// removed and run again; one that never ran is abandoned as before; an
// answer from podman, or podman that cannot be asked, is no start.
func TestStartedAnyway(t *testing.T) {
	noAnswer := errors.New("podman API POST /containers/x/start: EOF")
	for _, tc := range []struct {
		name     string
		startErr error
		status   int
		state    string
		started  bool
		askErr   bool
	}{
		{"ran and exited", noAnswer, http.StatusOK, "exited", true, false},
		{"running", noAnswer, http.StatusOK, "running", true, false},
		{"never ran", noAnswer, http.StatusOK, "created", false, false},
		{"gone", noAnswer, http.StatusNotFound, "", false, false},
		{"cannot ask", noAnswer, http.StatusInternalServerError, "", false, true},
		{"podman answered", &APIError{Op: "POST start", Status: http.StatusInternalServerError}, http.StatusOK, "exited", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "p.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.status == http.StatusNotFound {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(`{"cause":"no such container","message":"no container with name or ID x found"}`))
					return
				}
				w.WriteHeader(tc.status)
				_, _ = fmt.Fprintf(w, `{"Id":"x","State":{"Status":%q}}`, tc.state)
			})}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { srv.Close() })
			d := &Driver{c: newClient(sock)}
			defer d.c.close()
			started, ierr := d.startedAnyway(context.Background(), "x", tc.startErr)
			if started != tc.started || (ierr != nil) != tc.askErr {
				t.Errorf("startedAnyway = %v, %v; want %v, error %v", started, ierr, tc.started, tc.askErr)
			}
		})
	}
}
