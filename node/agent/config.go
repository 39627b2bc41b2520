package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/hcllimit"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/nomad"
	"github.com/berth/berth/store"
)

// ErrInvalidConfig is matched (errors.Is) by every configuration error.
var ErrInvalidConfig = errors.New("invalid agent configuration")

// GC modes.
const (
	// GCFull reconciles berth's records and sweeps the host for leftovers
	// of berth's networks that no record explains. Right when this agent
	// is the only berth on the host.
	GCFull = "full"
	// GCRecords only drives berth's own records to a clean state (tasks
	// of a dead agent, half-made or pending teardowns). For hosts where
	// other berth data dirs are in use (tests, a second agent).
	GCRecords = "records"
)

// Config is the agent's configuration, as read from its HCL file: the
// node's settings (node.Config, shared with every berth command) and the
// agent's own. Every setting has a default that works on a machine
// prepared by scripts/setup.sh; durations are Go duration strings ("5m").
// Tags are node.Settings': one name per setting, in the file and as a
// flag.
type Config struct {
	node.Config

	// GCInterval is how often garbage collection runs; "0" disables the
	// periodic run (the reconcile at start always runs).
	GCInterval string `hcl:"gc_interval,optional" help:"how often garbage collection runs (0: only the reconcile at start)"`
	// GCMode is GCFull or GCRecords.
	GCMode string `hcl:"gc_mode,optional" help:"garbage collection scope: full (records and host sweep) or records (this data dir's records only)"`
	// Retention is how many finished allocations (records and log
	// directories) are kept per job.
	Retention int `hcl:"retention,optional" help:"finished allocations (records and log dirs) kept per job"`
	// StopTimeout bounds how long a job stop request waits for the job's
	// tasks and networks to be gone before answering 202.
	StopTimeout string `hcl:"stop_timeout,optional" help:"how long a job stop request waits for tasks and networks to be gone"`

	// DrainOnShutdown makes SIGTERM/SIGINT stop every workload before the
	// agent exits, as `berth agent drain` does; by default they keep
	// running and the next agent re-adopts them.
	DrainOnShutdown bool `hcl:"drain_on_shutdown,optional" help:"on SIGTERM/SIGINT stop every workload and tear its network down before exiting (default: leave them running for the next agent)"`

	API *APIConfig `hcl:"api,block"`
	// File is the HCL file LoadConfig read ("" for none): it may hold
	// the token. Not a setting (no hcl tag).
	File string
	// Nomad, when present, makes the agent reclaim what Nomad leaves on
	// this node (see package nomad): a full reconcile at start and every
	// gc_interval, and each allocation's leftovers seconds after it turns
	// terminal. Unset settings come from the nomad CLI's environment. Its
	// flags are --nomad-address and --nomad-grace-period (the token is
	// never a flag).
	Nomad *nomad.Config `hcl:"nomad,block" flag:"-"`
}

// APIConfig says where the HTTP API listens.
type APIConfig struct {
	// Socket is the unix socket (mode 0600).
	Socket string `hcl:"socket,optional" alias:"socket" help:"API unix socket (mode 0600)"`
	// TCPAddress, when set, also serves the API on TCP; every request
	// there needs the bearer token.
	TCPAddress string `hcl:"tcp_address,optional" alias:"tcp-address" help:"also serve the API on this TCP address (host:port); needs a token"`
	// NomadAddress, when set, serves Nomad's HTTP API v1 on this TCP
	// address (package nomadapi), with the TCP API's token and TLS.
	NomadAddress string `hcl:"nomad_address,optional" alias:"nomad-api" help:"also serve Nomad's HTTP API on this TCP address (host:port, e.g. 127.0.0.1:4646) for the nomad CLI; needs a token, as tcp_address"`
	// Token has no flag: the command line shows in ps.
	Token string `hcl:"token,optional" flag:"-"`
	// TokenFile holds the token (surrounding white space is ignored);
	// it wins over Token. It must not be accessible to group or others.
	TokenFile string `hcl:"token_file,optional" alias:"token-file" help:"file holding the bearer token the TCP API requires (mode 0600 or stricter)"`
	// TLS serves the TCP API over TLS; required unless the address is a
	// literal loopback IP (a host name, even localhost, is not) or
	// AllowPlaintext.
	TLS *TLSConfig `hcl:"tls,block"`
	// AllowPlaintext lets the TCP API listen on an address other than
	// loopback without TLS: the token (root on this node) then crosses
	// the network in clear text.
	AllowPlaintext bool `hcl:"allow_plaintext,optional" help:"allow the TCP API without TLS on an address that is not loopback (the token travels in clear text)"`
	// MaxConnections bounds the connections each listener (socket, TCP)
	// serves at once; more wait in the kernel's backlog.
	MaxConnections int `hcl:"max_connections,optional" help:"connections each API listener serves at once (further ones wait)"`
	// ReadTimeout bounds how long a client may take to send a whole
	// request, headers and body.
	ReadTimeout string `hcl:"read_timeout,optional" help:"how long a client may take to send a whole request (headers and body)"`
}

// TLSConfig is the TCP API's TLS: the agent's certificate and key, and
// the CA that client certificates are verified against.
type TLSConfig struct {
	CertFile string `hcl:"cert_file,optional" help:"PEM certificate (chain) the TCP API presents; with key_file, turns TLS on"`
	KeyFile  string `hcl:"key_file,optional" help:"PEM private key of cert_file"`
	// CAFile, when set, verifies the client certificates clients present
	// (optional unless VerifyClient).
	CAFile       string `hcl:"ca_file,optional" help:"PEM CA bundle that client certificates are verified against"`
	VerifyClient bool   `hcl:"verify_client,optional" help:"require a client certificate signed by ca_file"`
}

// API defaults.
const (
	DefaultMaxConnections = 256
	DefaultReadTimeout    = 30 * time.Second
)

// DefaultConfig is the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Config:      node.Default(),
		GCInterval:  "5m",
		GCMode:      GCFull,
		Retention:   store.DefaultRetention,
		StopTimeout: "2m",
		API: &APIConfig{Socket: api.DefaultSocket, TLS: &TLSConfig{},
			MaxConnections: DefaultMaxConnections, ReadTimeout: DefaultReadTimeout.String()},
	}
}

// LoadConfig reads an HCL configuration file over the defaults. Unknown
// settings and wrong types are errors naming file:line:col.
func LoadConfig(path string) (Config, error) {
	f, err := openRegular(path, "-config")
	if err != nil {
		return Config{}, fmt.Errorf("%w: read %s: %w", ErrInvalidConfig, path, err)
	}
	defer f.Close()
	// One byte more than the parser takes, so that it names the limit.
	src, err := io.ReadAll(io.LimitReader(f, hcllimit.MaxBytes+1))
	if err != nil {
		return Config{}, fmt.Errorf("%w: read %s: %w", ErrInvalidConfig, path, err)
	}
	cfg, err := ParseConfig(src, path)
	cfg.File = path
	return cfg, err
}

// secretFiles are the agent's credentials on the host: its config file,
// token file and TLS key. No exec task reads them, wherever chroot_env
// binds them (node.Options.Secrets).
func (cfg *Config) secretFiles() []string {
	var out []string
	for _, p := range []string{cfg.File, cfg.API.TokenFile} {
		if p != "" {
			out = append(out, p)
		}
	}
	if cfg.API.TLS != nil && cfg.API.TLS.KeyFile != "" {
		out = append(out, cfg.API.TLS.KeyFile)
	}
	return out
}

// ParseConfig is LoadConfig on text; filename is used in positions.
func ParseConfig(src []byte, filename string) (Config, error) {
	cfg := DefaultConfig()
	if err := node.DecodeHCL(src, filename, &cfg.Config, &cfg); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return cfg, nil
}

// settings is the configuration checked and converted.
type settings struct {
	nomad       *nomad.Settings
	gcInterval  time.Duration
	stopTimeout time.Duration
	readTimeout time.Duration
	token       string
	// tls is the TCP API's TLS configuration; nil serves plain HTTP.
	tls *tls.Config
}

// check validates cfg (the node's settings and the agent's) and resolves
// what needs resolving (the token file).
func (cfg *Config) check() (*settings, error) {
	var p node.Problems
	cfg.Config.Check(&p)
	s := &settings{}
	if cfg.API == nil {
		cfg.API = DefaultConfig().API
	}
	if cfg.API.TLS == nil {
		cfg.API.TLS = &TLSConfig{}
	}
	if !filepath.IsAbs(cfg.API.Socket) {
		p.Add("api.socket", "%q must be an absolute path", cfg.API.Socket)
	}
	// sun_path is 108 bytes with its NUL.
	if len(cfg.API.Socket) > 107 {
		p.Add("api.socket", "%q is longer than a unix socket path may be (107 bytes)", cfg.API.Socket)
	}
	var err error
	if s.gcInterval, err = time.ParseDuration(cfg.GCInterval); err != nil || s.gcInterval < 0 {
		p.Add("gc_interval", "%q: use a duration such as \"5m\", or \"0\" to disable periodic gc", cfg.GCInterval)
	}
	if s.stopTimeout, err = time.ParseDuration(cfg.StopTimeout); err != nil || s.stopTimeout <= 0 {
		p.Add("stop_timeout", "%q: use a positive duration such as \"2m\"", cfg.StopTimeout)
	}
	if cfg.GCMode != GCFull && cfg.GCMode != GCRecords {
		p.Add("gc_mode", "%q: use %q or %q", cfg.GCMode, GCFull, GCRecords)
	}
	if cfg.Retention < 1 {
		p.Add("retention", "%d: keep at least 1 finished allocation per job", cfg.Retention)
	}
	// A program's APIConfig that leaves them out gets the defaults.
	if cfg.API.MaxConnections == 0 {
		cfg.API.MaxConnections = DefaultMaxConnections
	}
	if cfg.API.ReadTimeout == "" {
		cfg.API.ReadTimeout = DefaultReadTimeout.String()
	}
	if cfg.API.MaxConnections < 1 {
		p.Add("api.max_connections", "%d: allow at least 1 connection", cfg.API.MaxConnections)
	}
	if s.readTimeout, err = time.ParseDuration(cfg.API.ReadTimeout); err != nil || s.readTimeout <= 0 {
		p.Add("api.read_timeout", "%q: use a positive duration such as \"30s\"", cfg.API.ReadTimeout)
	}
	if cfg.API.TCPAddress != "" || cfg.API.NomadAddress != "" {
		s.tls = checkTLS(cfg.API.TLS, &p)
		for _, l := range []struct{ field, addr string }{{"api.tcp_address", cfg.API.TCPAddress}, {"api.nomad_address", cfg.API.NomadAddress}} {
			if l.addr != "" {
				checkTCPAddress(l.field, l.addr, s.tls != nil || cfg.API.AllowPlaintext, &p)
			}
		}
		s.token = cfg.API.Token
		tokenErr := false
		if cfg.API.TokenFile != "" {
			b, err := readSecret(cfg.API.TokenFile)
			if err != nil {
				p.Add("api.token_file", "%v", err)
				tokenErr = true
			}
			s.token = strings.TrimSpace(string(b))
		}
		switch {
		case tokenErr:
		case s.token == "":
			p.Addf("api.tcp_address or api.nomad_address is set but no token is: set api.token or api.token_file (the TCP APIs are refused without one)")
		case len(s.token) < 16:
			p.Addf("api token is %d characters long; use at least 16 (e.g. `head -c 24 /dev/urandom | base64`)", len(s.token))
		}
	}
	if cfg.Nomad != nil {
		ns, err := nomad.FromEnv(os.Getenv).Over(*cfg.Nomad).Check()
		if err != nil {
			p.Addf("nomad: %v", err)
		}
		s.nomad = &ns
	}
	if err := p.Err(ErrInvalidConfig); err != nil {
		return nil, err
	}
	return s, nil
}

// summary is the configuration without secrets, for /v1/agent/self.
func (cfg *Config) summary(tcpAddr string) api.ConfigSummary {
	return api.ConfigSummary{
		DataDir: cfg.DataDir, NetnsDir: cfg.NetnsDir, LockDir: cfg.LockDir,
		CNIConfigDir: cfg.CNIConfigDir, CNIPath: cfg.CNIPath, CNICacheDir: cfg.CNICacheDir,
		PodmanSocket:  cfg.PodmanSocket,
		BridgeNetwork: cfg.Bridge.Network, BridgeIface: cfg.Bridge.Iface, BridgeSubnet: cfg.Bridge.Subnet,
		Socket: cfg.API.Socket, TCPAddress: tcpAddr, TokenSet: tcpAddr != "", TLS: tcpAddr != "" && cfg.API.TLS != nil && cfg.API.TLS.CertFile != "",
		ClientCertRequired: tcpAddr != "" && cfg.API.TLS != nil && cfg.API.TLS.VerifyClient,
		MaxConnections:     cfg.API.MaxConnections, ReadTimeout: cfg.API.ReadTimeout,
		GCInterval: cfg.GCInterval, GCMode: cfg.GCMode, Retention: cfg.Retention, StopTimeout: cfg.StopTimeout,
		LogLevel: cfg.LogLevel, LogFormat: cfg.LogFormat,
	}
}

// checkTCPAddress checks a TCP listener's address: host:port, and a
// literal loopback IP unless the listener has TLS or clear text is
// allowed (secure).
func checkTCPAddress(field, addr string, secure bool, p *node.Problems) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		p.Add(field, "%q: use host:port, e.g. 127.0.0.1:4646", addr)
		return
	}
	switch {
	case secure || isLoopback(host):
	case net.ParseIP(host) == nil && host != "":
		p.Add(field, "%q is not a loopback address but a host name, and the TCP API has no TLS: without TLS only a literal loopback IP is accepted (127.0.0.1:PORT or [::1]:PORT), since what a name resolves to is not the agent's to check; "+
			"use one, or set api.tls { cert_file, key_file } (or api.allow_plaintext = true to accept clear text)", addr)
	default:
		p.Add(field, "%q is not a loopback address and the TCP API has no TLS: the token, which is root on this node, would cross the network in clear text; "+
			"set api.tls { cert_file, key_file } (or api.allow_plaintext = true to accept that)", addr)
	}
}
