package agent

import (
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// The banner names the scheme the TCP listener speaks: https with TLS,
// http without.
func TestReportBannerScheme(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		name := "plain"
		if withTLS {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, "10.199.236.0/24")
			e.cfg.API.TCPAddress, e.cfg.API.Token = "127.0.0.1:0", "btrep-"+testenv.RandSuffix(24)
			want := "http://"
			if withTLS {
				p := newPKI(t, e.dir, "api")
				e.cfg.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey}
				want = "https://"
			}
			var banner syncBuffer
			a, err := New(e.cfg, testLogger(t), WithVersion("test"), WithBanner(&banner))
			testenv.Must(t, err)
			testenv.Serve(t, "agent", a.Run, a.Reconciled())
			page := want + a.TCPAddr() + "/ui/"
			if !strings.Contains(banner.text(), page) {
				t.Errorf("banner does not name %s:\n%s", page, banner.text())
			}
		})
	}
}

func (s *syncBuffer) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
