package podman

import (
	"context"
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
