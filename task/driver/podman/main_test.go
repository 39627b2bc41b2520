package podman

import (
	"os"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }
