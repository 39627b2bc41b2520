package nomadapi_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/node/agent/agenttest"
)

// testToken is the agent's API token in these tests.
const testToken = "nomadapi-test-token-0123456789"

// nomadEnv is a berth agent serving Nomad's API, on a throw-away CNI
// network, for the real nomad CLI and Nomad's Go API client.
type nomadEnv struct {
	a    *agent.Agent
	c    *api.Client // berth's own client, on the socket
	net  *testenv.Network
	addr string // NOMAD_ADDR
	dir  string
}

// startNomadEnv starts an agent with its Nomad API on a free loopback
// port; subnet is the test's CNI network (10.199.X.0/24), bridge the
// agent's bridge network's subnet.
func startNomadEnv(t *testing.T, subnet, bridge string) *nomadEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequirePlugins(t, testenv.ReferencePlugins, "bridge", "host-local", "portmap", "firewall", "loopback")
	nw := testenv.NewNetwork(t, testenv.NetworkSpec{Name: "bnapi-" + testenv.RandSuffix(6), Subnet: subnet, Portmap: true, Firewall: true, Loopback: true})
	dir, err := os.MkdirTemp("", "bnapi")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := agent.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = nw.ConfDir
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	cfg.GCMode = agent.GCRecords // a full sweep would take other tests' attachments
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true // stopped with the test: leave nothing
	cfg.Bridge = &node.Bridge{Network: "bnapi-br-" + testenv.RandSuffix(6), Iface: "bnap" + testenv.RandSuffix(6), Subnet: bridge}
	cfg.API = &agent.APIConfig{Socket: filepath.Join(dir, "b.sock"), NomadAddress: "127.0.0.1:0", Token: testToken}
	cfg.Client.NetworkInterface = "lo"
	a := agenttest.Start(t, cfg, filepath.Join(dir, "agent.log"))
	<-a.Reconciled()
	c, err := api.NewClient("unix://"+a.SocketPath(), "")
	testenv.Must(t, err)
	t.Cleanup(c.Close)
	return &nomadEnv{a: a, c: c, net: nw, addr: "http://" + a.NomadAddr(), dir: dir}
}

// jobFile writes src, its cni/private network pointed at the test
// network, into the test's dir and returns its path.
func (e *nomadEnv) jobFile(t *testing.T, name, src string) string {
	t.Helper()
	src = strings.ReplaceAll(src, "cni/private", "cni/"+e.net.Name)
	p := filepath.Join(e.dir, name)
	testenv.Must(t, os.WriteFile(p, []byte(src), 0o644))
	return p
}

// nomad runs the real nomad CLI against the agent and returns its
// combined output and exit code.
func (e *nomadEnv) nomad(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("nomad not installed: run scripts/setup.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+e.addr, "NOMAD_TOKEN="+testToken, "NO_COLOR=1", "NOMAD_CLI_NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nomad %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ nomad %s (exit %d)\n%s", strings.Join(args, " "), code, out.String())
	return out.String(), code
}
