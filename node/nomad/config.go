// Package nomad makes Nomad an owner of attachments for berth's gc: it
// asks the local Nomad client agent which allocations run on this node,
// and tells gc (through gc.Owner) which of the namespaces, libcni cache
// entries, host-local leases and iptables rules Nomad made are dead. It
// also follows Nomad's event stream to reclaim an allocation's leftovers
// seconds after it turns terminal (Run), and checks the connection for
// `berth doctor` (Check).
//
// Only github.com/hashicorp/nomad/api (MPL-2.0) is used to talk to Nomad,
// and only its transport: the shapes berth reads are its own, so that a
// Nomad of another version than the client library decodes alike.
//
// It fails closed: without an answer from Nomad nothing is judged dead,
// a running or pending allocation is never touched, and an allocation
// Nomad does not know any more is reclaimed only once its evidence is
// older than a grace period and no process lives in its namespace.
package nomad

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrInvalidConfig is matched (errors.Is) by every configuration error.
var ErrInvalidConfig = errors.New("invalid Nomad configuration")

// The environment variables the nomad CLI reads, read the same way.
const (
	EnvAddress       = "NOMAD_ADDR"
	EnvToken         = "NOMAD_TOKEN"
	EnvRegion        = "NOMAD_REGION"
	EnvNamespace     = "NOMAD_NAMESPACE"
	EnvCACert        = "NOMAD_CACERT"
	EnvClientCert    = "NOMAD_CLIENT_CERT"
	EnvClientKey     = "NOMAD_CLIENT_KEY"
	EnvTLSServerName = "NOMAD_TLS_SERVER_NAME"
)

// Defaults.
const (
	DefaultAddress = "http://127.0.0.1:4646"
	// DefaultGracePeriod is how old the evidence of an allocation Nomad
	// does not know must be before it is reclaimed: Nomad forgets
	// allocations it garbage-collected, and a grace period keeps anything
	// that might be in the making from being judged on a missing answer.
	DefaultGracePeriod = time.Hour
	// DefaultTeardownWait is the deadline of Nomad's own teardown: how
	// long after an allocation turned terminal its libcni cache entry (a
	// DEL Nomad has yet to run) is left to Nomad while its client is alive
	// and still holds the allocation. Well above Nomad's own pace (its CNI
	// calls run one at a time, a minute behind on a busy 2-vCPU node).
	DefaultTeardownWait = 10 * time.Minute
	// DefaultDataDir is the data_dir of Nomad's packaged configuration
	// (/etc/nomad.d/nomad.hcl).
	DefaultDataDir = "/opt/nomad/data"
	// AllNamespaces is the namespace whose events are followed by
	// default: allocations of every namespace run on a node.
	AllNamespaces = "*"
)

// Config says how to reach the local Nomad client agent. Every field is
// also read from the nomad CLI's environment (FromEnv); a field set in a
// configuration file or flag wins over the environment (Over).
type Config struct {
	// Address is the client agent's HTTP address (NOMAD_ADDR).
	Address string `hcl:"address,optional"`
	// Token is an ACL token (NOMAD_TOKEN) allowed agent:read, node:read
	// and read-job in every namespace.
	Token string `hcl:"token,optional"`
	// Region (NOMAD_REGION) and Namespace (NOMAD_NAMESPACE): the namespace
	// whose allocation events are followed, every one ("*") by default.
	Region    string `hcl:"region,optional"`
	Namespace string `hcl:"namespace,optional"`
	// TLS: CA certificate, client certificate and key, server name
	// (NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY,
	// NOMAD_TLS_SERVER_NAME).
	CACert        string `hcl:"ca_cert,optional"`
	ClientCert    string `hcl:"client_cert,optional"`
	ClientKey     string `hcl:"client_key,optional"`
	TLSServerName string `hcl:"tls_server_name,optional"`
	// GracePeriod is a Go duration (default "1h"): see DefaultGracePeriod.
	GracePeriod string `hcl:"grace_period,optional"`
	// DataDir is the Nomad agent's data_dir as the operator configured it
	// (default DefaultDataDir). The client's identity and the host
	// evidence of its allocations are read there, never at a path the
	// API names.
	DataDir string `hcl:"data_dir,optional"`
	// TeardownDeadline is a Go duration (default "10m"): see
	// DefaultTeardownWait.
	TeardownDeadline string `hcl:"teardown_deadline,optional"`
	// ReclaimWithoutEvidence: namespaces named by an allocation ID with no
	// host evidence that they were Nomad's (no alloc dir under DataDir, no
	// libcni cache entry, not held by Nomad's client) are Nomad's too. Off
	// by default: other runtimes name namespaces by UUIDs as well.
	ReclaimWithoutEvidence bool `hcl:"reclaim_without_evidence,optional"`
}

// FromEnv reads the nomad CLI's environment through getenv (os.Getenv).
func FromEnv(getenv func(string) string) Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	return Config{
		Address:       getenv(EnvAddress),
		Token:         getenv(EnvToken),
		Region:        getenv(EnvRegion),
		Namespace:     getenv(EnvNamespace),
		CACert:        getenv(EnvCACert),
		ClientCert:    getenv(EnvClientCert),
		ClientKey:     getenv(EnvClientKey),
		TLSServerName: getenv(EnvTLSServerName),
	}
}

// Over returns c with every field that is set in over replaced by over's.
func (c Config) Over(over Config) Config {
	pick := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	pick(&c.Address, over.Address)
	pick(&c.Token, over.Token)
	pick(&c.Region, over.Region)
	pick(&c.Namespace, over.Namespace)
	pick(&c.CACert, over.CACert)
	pick(&c.ClientCert, over.ClientCert)
	pick(&c.ClientKey, over.ClientKey)
	pick(&c.TLSServerName, over.TLSServerName)
	pick(&c.GracePeriod, over.GracePeriod)
	pick(&c.DataDir, over.DataDir)
	pick(&c.TeardownDeadline, over.TeardownDeadline)
	c.ReclaimWithoutEvidence = c.ReclaimWithoutEvidence || over.ReclaimWithoutEvidence
	return c
}

// Settings is a checked Config with the defaults filled in.
type Settings struct {
	Config
	Grace time.Duration
	// TeardownWait: see DefaultTeardownWait.
	TeardownWait time.Duration
}

// Check validates c and fills in the defaults. Errors name the setting.
func (c Config) Check() (Settings, error) {
	s := Settings{Config: c, TeardownWait: DefaultTeardownWait}
	var errs []string
	if s.Address == "" {
		s.Address = DefaultAddress
	}
	u, err := url.Parse(s.Address)
	web := err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
	if !web && (err != nil || u.Scheme != "unix" || u.Path == "") {
		errs = append(errs, fmt.Sprintf("address %q: use http://host:port, https://host:port or unix:///path (as NOMAD_ADDR)", s.Address))
	}
	if s.Namespace == "" {
		s.Namespace = AllNamespaces
	}
	s.Grace = DefaultGracePeriod
	if c.GracePeriod != "" {
		d, err := time.ParseDuration(c.GracePeriod)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("grace_period %q: use a duration such as \"1h\"", c.GracePeriod))
		}
		s.Grace = d
	}
	if c.TeardownDeadline != "" {
		d, err := time.ParseDuration(c.TeardownDeadline)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Sprintf("teardown_deadline %q: use a duration such as \"10m\"", c.TeardownDeadline))
		}
		s.TeardownWait = d
	}
	if s.DataDir == "" {
		s.DataDir = DefaultDataDir
	}
	if !filepath.IsAbs(s.DataDir) {
		errs = append(errs, fmt.Sprintf("data_dir %q: use the absolute data_dir of this node's Nomad agent", s.DataDir))
	}
	s.DataDir = filepath.Clean(s.DataDir)
	if (s.ClientCert == "") != (s.ClientKey == "") {
		errs = append(errs, "client_cert and client_key go together (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)")
	}
	for name, p := range map[string]string{"ca_cert": s.CACert, "client_cert": s.ClientCert, "client_key": s.ClientKey} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(errs) > 0 {
		return Settings{}, fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(errs, "; "))
	}
	return s, nil
}
