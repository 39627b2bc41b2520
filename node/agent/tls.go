package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"github.com/berth/berth/node"
)

// checkTLS builds the TCP API's TLS configuration from the tls block;
// nil when the block sets nothing. Problems are added to p.
func checkTLS(c *TLSConfig, p *node.Problems) *tls.Config {
	if c == nil || *c == (TLSConfig{}) {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" {
		p.Addf("api.tls needs both cert_file and key_file (got cert_file %q, key_file %q)", c.CertFile, c.KeyFile)
		return nil
	}
	n := len(*p)
	keyPEM, err := readPrivate(c.KeyFile, "api.tls.key_file", 0o007, maxTLSFileBytes)
	if err != nil {
		p.Add("api.tls.key_file", "%v", err)
	}
	certPEM, err := readRegular(c.CertFile, "api.tls.cert_file", maxTLSFileBytes)
	if err != nil {
		p.Add("api.tls.cert_file", "%v", err)
	}
	var cert tls.Certificate
	if len(*p) == n {
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
			p.Add("api.tls.cert_file", "cannot load %s with key %s: %v", c.CertFile, c.KeyFile, err)
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	switch {
	case c.CAFile != "":
		pem, err := readRegular(c.CAFile, "api.tls.ca_file", maxTLSFileBytes)
		if err != nil {
			p.Add("api.tls.ca_file", "%v", err)
			break
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			p.Add("api.tls.ca_file", "%s holds no PEM certificate", c.CAFile)
			break
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if c.VerifyClient {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	case c.VerifyClient:
		p.Add("api.tls.verify_client", "needs api.tls.ca_file, the CA that signs the client certificates")
	}
	if len(*p) > n {
		return nil
	}
	return cfg
}

// isLoopback reports whether a listen host only reaches this machine: a
// literal loopback IP. A host name is not, not even "localhost": what it
// resolves to is up to /etc/hosts and the resolver, not this check. An
// empty host or 0.0.0.0 listens on every address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Bounds of the files the agent reads: a token is a line, a PEM file a
// few certificates.
const (
	maxSecretBytes  = 64 << 10
	maxTLSFileBytes = 1 << 20
)

// readSecret reads a token file that only its owner (this process's user)
// may read or write: anyone else who can read the token is root on this
// node through the API.
func readSecret(path string) ([]byte, error) {
	return readPrivate(path, "api.token_file", 0o077, maxSecretBytes)
}

// readPrivate reads a file of setting that must grant none of forbidden
// (checkPrivateFile), opened as openRegular opens, of at most max bytes.
func readPrivate(path, setting string, forbidden os.FileMode, max int64) ([]byte, error) {
	f, err := openRegular(path, setting)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkPrivateFile(f, path, forbidden); err != nil {
		return nil, err
	}
	return readBounded(f, setting, max)
}

// checkPrivateFile refuses a file whose mode grants any of forbidden, or
// that another user owns (who could change it).
func checkPrivateFile(f *os.File, path string, forbidden os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	if m := fi.Mode().Perm(); m&forbidden != 0 {
		who := "group or others"
		if forbidden&0o070 == 0 {
			who = "others"
		}
		return fmt.Errorf("%s is accessible to %s (mode %04o): `chmod %04o %s`", path, who, m, m&^forbidden, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not by this process's user (uid %d) or root", path, st.Uid, os.Geteuid())
	}
	return nil
}

// limit bounds the connections a listener serves at once: further ones
// wait in the kernel's backlog until one closes.
func (a *Agent) limit(l net.Listener) net.Listener {
	return netutil.LimitListener(l, a.cfg.API.MaxConnections)
}

// rejectLog writes rejected API requests to the log at most once per
// interval: the first of a quiet period at once, then one line per
// interval with how many followed and from where, so that a flood of bad
// tokens cannot flood the log.
type rejectLog struct {
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	timer   *time.Timer // nil: quiet, the next rejection is logged at once
	count   int
	remotes map[string]int
	reason  string
	closed  bool
}

// maxRemotes bounds the addresses one summary line names.
const maxRemotes = 5

func (l *rejectLog) reject(remote, method, path, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.timer == nil {
		l.log.Warn("API request rejected", "remote", remote, "method", method, "path", path, "reason", reason)
		l.timer = time.AfterFunc(l.every, l.flush)
		return
	}
	l.count++
	l.reason = reason
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if l.remotes == nil {
		l.remotes = map[string]int{}
	}
	if _, ok := l.remotes[host]; ok || len(l.remotes) < maxRemotes {
		l.remotes[host]++
	}
}

// flush writes what was counted since the last line, and goes quiet when
// nothing was.
func (l *rejectLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == 0 || l.closed {
		l.timer = nil
		return
	}
	var from []string
	for h, n := range l.remotes {
		from = append(from, fmt.Sprintf("%s (%d)", h, n))
	}
	sort.Strings(from)
	l.log.Warn("API requests rejected", "count", l.count, "interval", l.every.String(),
		"remotes", strings.Join(from, ", "), "last_reason", l.reason)
	l.count, l.remotes = 0, nil
	l.timer = time.AfterFunc(l.every, l.flush)
}

// close writes what is still counted and stops.
func (l *rejectLog) close() {
	l.mu.Lock()
	t := l.timer
	l.mu.Unlock()
	if t != nil && t.Stop() {
		l.flush()
	}
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
}
