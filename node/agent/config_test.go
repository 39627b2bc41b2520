package agent

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/berth/berth/node"
)

// The example config must parse and equal the defaults: it documents them.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	cfg, err := LoadConfig("../../examples/agent/berth.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.File = "../../examples/agent/berth.hcl"
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("example config differs from the defaults:\n got %+v %+v %+v\nwant %+v %+v %+v", cfg, *cfg.Bridge, *cfg.API, want, *want.Bridge, *want.API)
	}
	if _, err := cfg.check(); err != nil {
		t.Errorf("defaults do not pass the checks: %v", err)
	}
}

// The example documents every setting, the node's and the agent's: each
// is set in it, or shown commented out (the TCP API's need a token).
func TestExampleConfigListsEverySetting(t *testing.T) {
	src, err := os.ReadFile("../../examples/agent/berth.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	for _, s := range append(node.Settings(&cfg.Config), node.Settings(&cfg)...) {
		key := s.Path[strings.LastIndex(s.Path, ".")+1:]
		// A labeled block (host_volume "name" { ... }) is shown as one.
		if !regexp.MustCompile(`(?m)^\s*(#\s*)?` + regexp.QuoteMeta(key) + `\s*(=|"[^"]*"\s*\{)`).Match(src) {
			t.Errorf("examples/agent/berth.hcl does not show %s", s.Path)
		}
	}
}

func TestParseConfigOverlaysDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
data_dir = "/srv/berth"
bridge {
  subnet = "10.199.88.0/24"
}
api {
  tcp_address = "127.0.0.1:4646"
}
`), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if cfg.DataDir != "/srv/berth" || cfg.NetnsDir != d.NetnsDir || cfg.GCInterval != d.GCInterval {
		t.Errorf("attributes: %+v", cfg)
	}
	if cfg.Bridge.Subnet != "10.199.88.0/24" || cfg.Bridge.Network != d.Bridge.Network || cfg.Bridge.Iface != d.Bridge.Iface {
		t.Errorf("bridge block not overlaid: %+v", *cfg.Bridge)
	}
	if cfg.API.TCPAddress != "127.0.0.1:4646" || cfg.API.Socket != d.API.Socket {
		t.Errorf("api block not overlaid: %+v", *cfg.API)
	}
}

func TestNomadBlock(t *testing.T) {
	t.Setenv("NOMAD_TOKEN", "from-env")
	t.Setenv("NOMAD_ADDR", "http://127.0.0.1:1")
	cfg, err := ParseConfig([]byte("nomad {\n  address = \"http://127.0.0.1:25646\"\n  grace_period = \"2h\"\n}\n"), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s, err := cfg.check()
	if err != nil {
		t.Fatal(err)
	}
	if n := s.nomad; n == nil || n.Address != "http://127.0.0.1:25646" || n.Token != "from-env" || n.Grace.Hours() != 2 {
		t.Errorf("nomad settings %+v", n)
	}
	def := DefaultConfig()
	if s, _ := def.check(); s.nomad != nil {
		t.Errorf("nomad on without a block")
	}
	cfg, _ = ParseConfig([]byte("nomad {\n  grace_period = \"soon\"\n}\n"), "a.hcl")
	if _, err := cfg.check(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "nomad: ") {
		t.Errorf("bad grace period: %v", err)
	}
}

var positioned = regexp.MustCompile(`bad\.hcl:\d+:\d+: `)

func TestParseConfigErrors(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown key", `data_dri = "/x"`, `Unsupported argument`},
		{"unknown block", "apii {\n}\n", `Unsupported block type`},
		{"unknown key in block", "api {\n  sockt = \"/x\"\n}\n", `Unsupported argument`},
		{"wrong type", `retention = "many"`, `a number is required`},
		{"syntax", `data_dir = `, `bad.hcl:1`},
		{"duplicate block", "api {\n}\napi {\n}\n", `Duplicate api block`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.src), "bad.hcl")
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !positioned.MatchString(err.Error()) {
				t.Errorf("error %q: want ErrInvalidConfig mentioning %q at file:line:col", err, tc.want)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("  0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"relative data dir", func(c *Config) { c.DataDir = "data" }, "data_dir"},
		{"bad gc interval", func(c *Config) { c.GCInterval = "often" }, "gc_interval"},
		{"gc disabled", func(c *Config) { c.GCInterval = "0" }, ""},
		{"bad gc mode", func(c *Config) { c.GCMode = "some" }, "gc_mode"},
		{"zero retention", func(c *Config) { c.Retention = 0 }, "retention"},
		{"bad log level", func(c *Config) { c.LogLevel = "loud" }, "log_level"},
		{"bad log format", func(c *Config) { c.LogFormat = "xml" }, "log_format"},
		{"bad subnet", func(c *Config) { c.Bridge.Subnet = "10.199.1.0" }, "bridge"},
		{"long bridge", func(c *Config) { c.Bridge.Iface = "averyveryverylongname" }, "bridge"},
		{"tcp without token", func(c *Config) { c.API.TCPAddress = "127.0.0.1:4646" }, "no token"},
		{"tcp with short token", func(c *Config) { c.API.TCPAddress = "127.0.0.1:4646"; c.API.Token = "short" }, "at least 16"},
		{"tcp with token", func(c *Config) { c.API.TCPAddress = "127.0.0.1:4646"; c.API.Token = "0123456789abcdef" }, ""},
		{"tcp with token file", func(c *Config) { c.API.TCPAddress = "127.0.0.1:0"; c.API.TokenFile = tokenFile }, ""},
		{"missing token file", func(c *Config) { c.API.TCPAddress = "127.0.0.1:0"; c.API.TokenFile = tokenFile + ".nope" }, "token_file"},
		{"bad tcp address", func(c *Config) { c.API.TCPAddress = "4646"; c.API.Token = "0123456789abcdef" }, "tcp_address"},
		{"socket too long", func(c *Config) { c.API.Socket = "/" + strings.Repeat("s", 120) }, "longer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			s, err := cfg.check()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
			if tc.name == "tcp with token file" && err == nil && s.token != "0123456789abcdef0123" {
				t.Errorf("token from file = %q", s.token)
			}
		})
	}
}

// The TCP API's hardening, checked before anything listens: a token file
// others can read, a non-loopback address without TLS, a half TLS block.
func TestConfigCheckTCPSecurity(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir, "cfg")
	token := func(mode os.FileMode) string {
		f := filepath.Join(dir, "token-"+mode.String())
		testenvMust(t, os.WriteFile(f, []byte("0123456789abcdef0123\n"), 0o600))
		testenvMust(t, os.Chmod(f, mode))
		return f
	}
	withTLS := func(c *Config) { c.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey} }
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" means valid
	}{
		{"token file 0600", func(c *Config) { c.API.TokenFile = token(0o600) }, ""},
		{"token file 0400", func(c *Config) { c.API.TokenFile = token(0o400) }, ""},
		{"token file group-readable", func(c *Config) { c.API.TokenFile = token(0o640) }, "is accessible to group or others (mode 0640): `chmod 0600"},
		{"token file world-readable", func(c *Config) { c.API.TokenFile = token(0o604) }, "accessible to group or others (mode 0604)"},
		{"token file not regular", func(c *Config) { c.API.TokenFile = dir }, "is not a regular file"},
		{"any address, plain", func(c *Config) { c.API.TCPAddress = "0.0.0.0:4646" }, `api.tcp_address (--api-tcp-address) "0.0.0.0:4646" is not a loopback address and the TCP API has no TLS`},
		{"empty host, plain", func(c *Config) { c.API.TCPAddress = ":4646" }, "is not a loopback address"},
		{"public name, plain", func(c *Config) { c.API.TCPAddress = "berth.example:4646" }, "is not a loopback address"},
		{"any address, plain allowed", func(c *Config) { c.API.TCPAddress = "0.0.0.0:4646"; c.API.AllowPlaintext = true }, ""},
		{"any address, TLS", func(c *Config) { c.API.TCPAddress = "0.0.0.0:4646"; withTLS(c) }, ""},
		{"localhost, plain", func(c *Config) { c.API.TCPAddress = "localhost:4646" }, "only a literal loopback IP is accepted"},
		{"localhost, plain allowed", func(c *Config) { c.API.TCPAddress = "localhost:4646"; c.API.AllowPlaintext = true }, ""},
		{"localhost, TLS", func(c *Config) { c.API.TCPAddress = "localhost:4646"; withTLS(c) }, ""},
		{"::1, plain", func(c *Config) { c.API.TCPAddress = "[::1]:4646" }, ""},
		{"cert without key", func(c *Config) { c.API.TLS = &TLSConfig{CertFile: p.serverCert} }, "needs both cert_file and key_file"},
		{"key of another cert", func(c *Config) { c.API.TLS = &TLSConfig{CertFile: p.serverCert, KeyFile: p.clientKey} }, "api.tls.cert_file (--api-tls-cert-file) cannot load"},
		{"verify_client without ca", func(c *Config) { withTLS(c); c.API.TLS.VerifyClient = true }, "api.tls.verify_client (--api-tls-verify-client) needs api.tls.ca_file"},
		{"ca not PEM", func(c *Config) { withTLS(c); c.API.TLS.CAFile = token(0o600) }, "holds no PEM certificate"},
		{"world-readable key", func(c *Config) {
			withTLS(c)
			b, err := os.ReadFile(p.serverKey)
			testenvMust(t, err)
			c.API.TLS.KeyFile = filepath.Join(dir, "open-key.pem")
			testenvMust(t, os.WriteFile(c.API.TLS.KeyFile, b, 0o600))
			testenvMust(t, os.Chmod(c.API.TLS.KeyFile, 0o644))
		}, "api.tls.key_file (--api-tls-key-file) " + filepath.Join(dir, "open-key.pem") + " is accessible to others (mode 0644): `chmod 0640"},
		{"client certificates", func(c *Config) { withTLS(c); c.API.TLS.CAFile = p.caCert; c.API.TLS.VerifyClient = true }, ""},
		{"bad read timeout", func(c *Config) { c.API.ReadTimeout = "0s" }, "api.read_timeout"},
		{"no connections", func(c *Config) { c.API.MaxConnections = -1 }, "api.max_connections"},
		{"limits left out", func(c *Config) { c.API.MaxConnections, c.API.ReadTimeout = 0, "" }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.API.TCPAddress, cfg.API.Token = "127.0.0.1:4646", "0123456789abcdef"
			tc.edit(&cfg)
			_, err := cfg.check()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// The agent's file gets the parser limits of job files: nesting that
// would overflow the parser's stack is a positioned error.
func TestParseConfigLimits(t *testing.T) {
	deep := "x = " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n"
	_, err := ParseConfig([]byte(deep), "deep.hcl")
	if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "deep.hcl:1:") || !strings.Contains(err.Error(), "Nested too deeply") {
		t.Fatalf("deep nesting: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.hcl")
	testenvMust(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 5<<20)+"\n"), 0o600))
	if _, err := LoadConfig(big); err == nil || !strings.Contains(err.Error(), "File too large") {
		t.Fatalf("big file: %v", err)
	}
}

func testenvMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"cni-debug", "a", "web_1.v2", strings.Repeat("x", maxNameLen)} {
		if err := validName("job ID", ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "x\x00", "é", strings.Repeat("x", maxNameLen+1)} {
		if err := validName("job ID", bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q accepted (%v)", bad, err)
		}
	}
}
