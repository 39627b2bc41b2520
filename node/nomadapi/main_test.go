package nomadapi_test

import (
	"os"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

// The tests run a real agent and the real nomad CLI against it: the host
// must be left as found (namespaces, veths, leases, chains, containers).
func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }
