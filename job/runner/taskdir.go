package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/berth/berth/internal/beneath"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/task/allocdir"
	"github.com/berth/berth/task/driver"
)

// The allocation directory, laid out as Nomad's:
//
//	<alloc dir>/alloc/           shared by the group's tasks (NOMAD_ALLOC_DIR)
//	<alloc dir>/alloc/data/      for the tasks' data
//	<alloc dir>/alloc/tmp/
//	<alloc dir>/alloc/logs/      0755 root's: the tasks' logs,
//	                             <task>.stdout.N, <task>.stderr.N
//	<alloc dir>/<task>/          the task's working directory
//	<alloc dir>/<task>/local/    0777, its own files, artifacts, payload (NOMAD_TASK_DIR)
//	<alloc dir>/<task>/secrets/  0700, a tmpfs (NOMAD_SECRETS_DIR)
//	<alloc dir>/<task>/tmp/
//
// secrets/ is a tmpfs (allocdir.MountSecrets), as in Nomad: what is
// written there is never on disk. It is the only mount in the directory,
// unmounted when the allocation ends (finish), by gc (kind "mount") when
// its agent died first, and by the Remover before the directory goes.

// sharedMode is the shared dirs' mode: any task user may create files
// there, as in Nomad (0777), and, unlike Nomad, only remove its own (the
// sticky bit; node/parity/testdata/expected-differences.txt).
const sharedMode = 0o777 | os.ModeSticky

// Modes of a task's own dirs. local/ is Nomad's 0777: whatever user the
// task runs as may write there (the allocation dir, 0750 root, keeps
// everyone else out). The task dir stays 0755 and secrets/ 0700 (owned by
// the task's user): a task must not replace the dirs berth writes its
// templates and payload into, nor others read its secrets.
const (
	taskDirMode  = 0o755
	localDirMode = 0o777
	secretsMode  = 0o700
)

// logDirMode keeps alloc/logs berth's: a task reads its logs there as
// under Nomad, but cannot plant a name in it (a symlink or hard link to a
// host file) for berth's log writer or readers to come across. Nomad's is
// 0777 the task user's (node/parity/testdata/expected-differences.txt).
const logDirMode = 0o755

// payloadMode is Nomad's mode for a dispatch payload file.
const payloadMode = 0o755

// makeAllocDirs creates the shared part of the allocation directory.
func (a *allocRun) makeAllocDirs() error {
	shared := driver.SharedDir(a.dir)
	for _, d := range []string{shared, filepath.Join(shared, "data"), filepath.Join(shared, "tmp")} {
		if err := mkdirMode(d, sharedMode); err != nil {
			return fmt.Errorf("allocation directory: %w", err)
		}
	}
	if err := mkdirMode(driver.LogDir(a.dir), logDirMode); err != nil {
		return fmt.Errorf("allocation directory: %w", err)
	}
	return nil
}

// makeTaskDir creates the task's directory and its local, secrets and tmp
// dirs, and returns the task's directory.
func (a *allocRun) makeTaskDir(ctx context.Context, t *jobspec.Task) (string, error) {
	if t.Name == filepath.Base(driver.SharedDir(a.dir)) {
		return "", fmt.Errorf("task %q: the name is that of the allocation's shared directory; rename the task", t.Name)
	}
	td := driver.TaskDir(a.dir, t.Name)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{td, taskDirMode},
		{filepath.Join(td, "local"), localDirMode},
		{filepath.Join(td, "secrets"), secretsMode},
		{filepath.Join(td, "tmp"), sharedMode},
	} {
		if err := mkdirMode(d.path, d.mode); err != nil {
			return "", fmt.Errorf("task %q: task directory: %w", t.Name, err)
		}
	}
	if err := allocdir.MountSecrets(ctx, filepath.Join(td, "secrets")); err != nil {
		return "", fmt.Errorf("task %q: %w", t.Name, err)
	}
	return td, nil
}

// mkdirMode makes dir (its parent must exist) with exactly mode, whatever
// the umask; an existing directory gets the mode too, anything else there
// is an error.
func mkdirMode(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	return os.Chmod(dir, mode)
}

// taskPaths are the NOMAD_ALLOC_DIR, NOMAD_TASK_DIR and NOMAD_SECRETS_DIR
// of t as the task sees them: the host's paths, or the driver's own for a
// driver whose tasks see a filesystem of their own.
func (a *allocRun) taskPaths(drv driver.Driver, t *jobspec.Task) driver.TaskPaths {
	if m, ok := drv.(driver.PathMapper); ok {
		if p := m.TaskPaths(); p != (driver.TaskPaths{}) {
			return p
		}
	}
	td := driver.TaskDir(a.dir, t.Name)
	return driver.TaskPaths{
		AllocDir:   driver.SharedDir(a.dir),
		TaskDir:    filepath.Join(td, "local"),
		SecretsDir: filepath.Join(td, "secrets"),
	}
}

// prepareTask is what happens once before a task first starts, as Nomad's
// task runner hooks: its directory, its artifacts, its dispatch payload.
// An error fails the task (and so the allocation); its event says why.
func (a *allocRun) prepareTask(ctx context.Context, t *jobspec.Task, vars map[string]string) error {
	i := a.taskIndex(t)
	td, err := a.makeTaskDir(ctx, t)
	if err != nil {
		a.taskEvent(i, TaskSetupFailure, err.Error())
		return err
	}
	var cred driver.Credential
	if len(t.Artifacts) > 0 {
		a.phase(ctx, PhaseArtifacts)
		a.taskEvent(i, TaskDownloadArtifacts, "Client is downloading artifacts")
		if cred, err = a.fetchCredential(ctx, t, td); err != nil {
			err = fmt.Errorf("task %q: artifacts: %w", t.Name, err)
			a.taskEvent(i, TaskArtifactFailed, err.Error())
			return err
		}
	}
	for _, art := range t.Artifacts {
		if err := a.fetchArtifact(ctx, td, art, vars, cred); err != nil {
			err = fmt.Errorf("task %q: artifact %s%s: %w", t.Name, art.Source, atPos(art.Pos), err)
			a.taskEvent(i, TaskArtifactFailed, err.Error())
			return err
		}
	}
	if p := t.PayloadPath(); p != "" && a.job.Dispatched {
		if err := a.writePayload(td, p); err != nil {
			err = fmt.Errorf("task %q: dispatch_payload: %w", t.Name, err)
			a.taskEvent(i, TaskSetupFailure, err.Error())
			return err
		}
	}
	return nil
}

// fetchCredential is who fetches t's artifacts: its user as its driver
// resolves it on this host (raw_exec: root unless it names one; exec:
// nobody), nobody for a driver whose users live in its images. A task
// user other than root gets its local/ and secrets/ (as the exec driver
// gives them at start), so that the fetch, as that user, can write there.
func (a *allocRun) fetchCredential(ctx context.Context, t *jobspec.Task, taskDir string) (driver.Credential, error) {
	drv, err := a.r.o.Drivers.Get(ctx, t.Driver)
	if err != nil {
		return driver.Credential{}, err
	}
	var cred driver.Credential
	if cr, ok := drv.(driver.CredentialResolver); ok {
		if cred, err = cr.TaskCredential(t.User); err != nil {
			return cred, err
		}
	} else {
		u, err := user.Lookup("nobody")
		if err != nil {
			return cred, fmt.Errorf("the user nobody, who fetches artifacts of %s tasks: %w", t.Driver, err)
		}
		cred.Name = "nobody"
		cred.UID, _ = strconv.Atoi(u.Uid)
		cred.GID, _ = strconv.Atoi(u.Gid)
		cred.Groups = []int{cred.GID}
	}
	if cred.UID == 0 {
		return cred, nil
	}
	for _, d := range []string{"local", "secrets"} {
		if err := os.Lchown(filepath.Join(taskDir, d), cred.UID, cred.GID); err != nil {
			return cred, fmt.Errorf("give %s to user %s: %w", d, cred.Name, err)
		}
	}
	return cred, nil
}

// writePayload writes the dispatched job's payload to rel (local/<file>)
// in the task dir; no payload writes an empty file, as Nomad.
func (a *allocRun) writePayload(taskDir, rel string) error {
	return replaceUnder(a.dir, filepath.Join(taskDir, rel), a.job.Payload, payloadMode, beneath.Keep)
}

// setupTask completes the driver's task with what the job file says of
// it beyond its config (its allocation dir, kill signal, resources), then
// prepares its directory (prepareTask).
func (a *allocRun) setupTask(ctx context.Context, t *jobspec.Task, dt *driver.Task, vars map[string]string) error {
	a.taskEvent(a.taskIndex(t), TaskSetup, "Building Task Directory")
	dt.AllocDir = a.dir
	if t.KillSignal != "" {
		sig, ok := jobspec.SignalNumber(t.KillSignal)
		if !ok {
			err := fmt.Errorf("task %q: kill_signal %q is not a signal of this system", t.Name, t.KillSignal)
			a.taskEvent(a.taskIndex(t), TaskSetupFailure, err.Error())
			return err
		}
		dt.KillSignal = sig
	}
	dt.Resources = driver.Resources{CPU: t.Resources.CPU, MemoryMB: t.Resources.MemoryMB, MemoryMaxMB: t.Resources.MemoryMaxMB}
	if err := a.prepareTask(ctx, t, vars); err != nil {
		return err
	}
	return a.startTemplates(ctx, t, dt, vars)
}
