package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/store"
)

// StoreOpener opens berth's store in its data dir for reading; the node
// provides it (node.Node.ReadStore), so that the doctor opens the store as
// every other command does. The caller closes the store.
type StoreOpener func(ctx context.Context) (*store.Store, error)

// CheckStore checks that dataDir is writable and its store readable
// (opened with open). A store another process has open (the agent) is
// fine: it is only reported. A missing store is not created.
func CheckStore(ctx context.Context, dataDir string, open StoreOpener) Check {
	c := Check{Name: "store"}
	if dataDir == "" {
		c.Status, c.Message = StatusSkip, "no data dir given"
		return c
	}
	fi, err := os.Stat(dataDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		parent := existingParent(dataDir)
		if err := unix.Access(parent, unix.W_OK); err != nil {
			c.Status = StatusFail
			c.Message = fmt.Sprintf("data dir %s does not exist and %s is not writable: %v", dataDir, parent, err)
			c.Fix = fmt.Sprintf("mkdir -p %s (as root) or pass --data-dir", dataDir)
			return c
		}
		c.Status, c.Message = StatusOK, fmt.Sprintf("data dir %s does not exist yet; berth creates it on first use", dataDir)
		return c
	case err != nil:
		c.Status, c.Message = StatusFail, fmt.Sprintf("data dir %s: %v", dataDir, err)
		c.Fix = fmt.Sprintf("check the permissions of %s and its parents", dataDir)
		return c
	case !fi.IsDir():
		c.Status, c.Message = StatusFail, fmt.Sprintf("data dir %s is not a directory", dataDir)
		c.Fix = fmt.Sprintf("move %s away or pass --data-dir", dataDir)
		return c
	}
	// Access(2) would say yes to root on a read-only file system: write.
	f, err := os.CreateTemp(dataDir, ".doctor-*")
	if err != nil {
		c.Status, c.Message = StatusFail, fmt.Sprintf("data dir %s is not writable: %v", dataDir, err)
		c.Fix = fmt.Sprintf("make %s writable by berth (a read-only or full file system?) or pass --data-dir", dataDir)
		return c
	}
	f.Close()
	os.Remove(f.Name())

	db := filepath.Join(dataDir, store.DBFile)
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		c.Status, c.Message = StatusOK, fmt.Sprintf("data dir %s is writable; no store yet (berth creates %s on first use)", dataDir, store.DBFile)
		return c
	}
	if open == nil {
		c.Status, c.Message = StatusSkip, fmt.Sprintf("data dir %s is writable; the store was not opened (no store opener given)", dataDir)
		return c
	}
	st, err := open(ctx)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrCorrupt):
		c.Status, c.Message = StatusFail, err.Error()
		c.Fix = corruptFix(db)
		return c
	case errors.Is(err, store.ErrNewerSchema):
		c.Status, c.Message = StatusFail, err.Error()
		c.Fix = "upgrade berth to the version that wrote the store"
		return c
	default:
		c.Status, c.Message = StatusFail, err.Error()
		c.Fix = fmt.Sprintf("check the permissions and free space of %s", dataDir)
		return c
	}
	defer st.Close()
	atts, err := st.ListAttachments(ctx)
	if err != nil {
		c.Status, c.Message = StatusFail, fmt.Sprintf("store %s opens but its attachments cannot be read: %v", db, err)
		if errors.Is(err, store.ErrCorrupt) {
			c.Fix = corruptFix(db)
		}
		return c
	}
	pending := 0
	for _, a := range atts {
		if a.Phase == store.PhaseTearingDown {
			pending++
		}
	}
	c.Status = StatusOK
	c.Message = fmt.Sprintf("store %s readable: %d attachment(s), %d pending teardown", db, len(atts), pending)
	if pid := store.OwnerPID(dataDir); pid > 0 {
		c.Message += fmt.Sprintf("; owned by the berth agent pid %d", pid)
	}
	return c
}

func corruptFix(db string) string {
	return fmt.Sprintf("with berth stopped, move the store aside: mv %s %s.corrupt; then start berth (it creates an empty store) and run `berth gc` to sweep the namespaces and CNI attachments the lost store knew about", db, db)
}

// existingParent is the nearest ancestor of path that exists.
func existingParent(path string) string {
	p := filepath.Clean(path)
	for {
		parent := filepath.Dir(p)
		if _, err := os.Stat(parent); err == nil || parent == p {
			return parent
		}
		p = parent
	}
}
