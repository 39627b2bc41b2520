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
	cfg, err := LoadConfig("../examples/agent/berth.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultConfig(); !reflect.DeepEqual(cfg, want) {
		t.Errorf("example config differs from the defaults:\n got %+v %+v %+v\nwant %+v %+v %+v", cfg, *cfg.Bridge, *cfg.API, want, *want.Bridge, *want.API)
	}
	if _, err := cfg.check(); err != nil {
		t.Errorf("defaults do not pass the checks: %v", err)
	}
}

// The example documents every setting, the node's and the agent's: each
// is set in it, or shown commented out (the TCP API's need a token).
func TestExampleConfigListsEverySetting(t *testing.T) {
	src, err := os.ReadFile("../examples/agent/berth.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	for _, s := range append(node.Settings(&cfg.Config), node.Settings(&cfg)...) {
		key := s.Path[strings.LastIndex(s.Path, ".")+1:]
		if !regexp.MustCompile(`(?m)^\s*(# )?` + regexp.QuoteMeta(key) + `\s*=`).Match(src) {
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
