package exec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/task/driver"
)

// propagationScript waits for the host's go-ahead, then says whether a
// mount the host made below the volume after the task started is there.
const propagationScript = `echo > /data/ready; while [ ! -e /data/go ]; do sleep 0.05; done; ` +
	`if [ -e /data/sub/marker ]; then echo visible; else echo hidden; fi`

// A volume_mount's propagation_mode, as Nomad's: a tmpfs the host mounts
// below the volume after the task started reaches a host-to-task (or
// bidirectional) mount, and not a private one, which keeps seeing the
// directory under it.
func TestExecVolumePropagation(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		mode driver.Propagation
		want string
	}{
		{driver.PropagationPrivate, "hidden"},
		{driver.PropagationHostToTask, "visible"},
		{driver.PropagationBidirectional, "visible"},
		{"", "hidden"},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			vol := testenv.SharedDir(t)
			testenv.Must(t, os.Mkdir(filepath.Join(vol, "sub"), 0o755))
			task := newTask(t, "", sh(propagationScript))
			task.Mounts = []driver.Mount{{Source: vol, Dest: "/data", Propagation: tc.mode}}
			h := start(t, NewExec(Options{StoreID: testStore}), task)
			testenv.WaitFile(ctxT(t), t, filepath.Join(vol, "ready"))
			testenv.MountTmpfs(t, filepath.Join(vol, "sub"))
			testenv.Must(t, os.WriteFile(filepath.Join(vol, "sub", "marker"), []byte("x"), 0o644))
			testenv.Must(t, os.WriteFile(filepath.Join(vol, "go"), nil, 0o644))
			if res := wait(t, h); !res.Successful() {
				t.Fatalf("task failed: %+v\n%s", res, readLog(t, task, "stderr"))
			}
			if got := strings.TrimSpace(readLog(t, task, "stdout")); got != tc.want {
				t.Errorf("the host's later mount is %s in the task, want %s", got, tc.want)
			}
		})
	}
}
