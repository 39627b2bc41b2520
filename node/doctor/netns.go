package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/network/evidence"
	"github.com/berth/berth/network/netns"
)

// Capability bits berth needs: CAP_SYS_ADMIN to unshare and bind-mount
// namespaces, CAP_NET_ADMIN for the plugins' links, addresses and iptables.
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// CheckPrivileges reads the effective capabilities from statusPath
// (/proc/self/status). Root is not enough on its own: a container or a
// capability-dropping wrapper can leave root without CAP_SYS_ADMIN.
func CheckPrivileges(statusPath string) Check {
	c := Check{Name: "privileges"}
	b, err := os.ReadFile(statusPath)
	if err != nil {
		c.Status, c.Message = StatusFail, fmt.Sprintf("cannot read capabilities from %s: %v", statusPath, err)
		c.Fix = "run berth on a Linux host with /proc mounted"
		return c
	}
	var capEff uint64
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			capEff, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			found = err == nil
		}
	}
	if !found {
		c.Status, c.Message = StatusFail, fmt.Sprintf("no CapEff line in %s", statusPath)
		c.Fix = "run berth on a Linux host with /proc mounted"
		return c
	}
	var missing []string
	if capEff&(1<<capSysAdmin) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN (create and pin network namespaces)")
	}
	if capEff&(1<<capNetAdmin) == 0 {
		missing = append(missing, "CAP_NET_ADMIN (CNI plugins configure links, addresses, iptables)")
	}
	who := fmt.Sprintf("uid %d", os.Geteuid())
	if os.Geteuid() == 0 {
		who = "root"
	}
	if len(missing) > 0 {
		c.Status = StatusFail
		c.Message = fmt.Sprintf("running as %s without %s", who, strings.Join(missing, " and "))
		c.Fix = "run berth as root (sudo berth ...), or grant it CAP_SYS_ADMIN and CAP_NET_ADMIN (e.g. systemd AmbientCapabilities=CAP_SYS_ADMIN CAP_NET_ADMIN)"
		return c
	}
	c.Status = StatusOK
	c.Message = fmt.Sprintf("running as %s with CAP_SYS_ADMIN and CAP_NET_ADMIN", who)
	return c
}

// CheckNetnsKernel checks that the kernel has network namespaces and that
// this process may create one: it unshares a namespace on a locked OS
// thread and returns the thread to its own, exactly as netns pins do,
// without mounting anything.
func CheckNetnsKernel(ctx context.Context, procDir string) Check {
	c := Check{Name: "netns/kernel"}
	self := filepath.Join(procDir, "self/ns/net")
	if _, err := os.Stat(self); err != nil {
		c.Status = StatusFail
		c.Message = fmt.Sprintf("%s: %v: the kernel lacks network namespaces (CONFIG_NET_NS) or /proc is not mounted", self, err)
		c.Fix = "use a kernel built with CONFIG_NET_NS=y (every distribution kernel is) and mount /proc"
		return c
	}
	if err := ctx.Err(); err != nil {
		c.Status, c.Message = StatusSkip, err.Error()
		return c
	}
	if err := netns.Probe(); err != nil {
		c.Status = StatusFail
		c.Message = fmt.Sprintf("cannot create a network namespace: %v", err)
		c.Fix = "run berth as root with CAP_SYS_ADMIN; inside a container, run it privileged"
		if errors.Is(err, unix.ENOSPC) {
			c.Fix = "raise the namespace limit: sysctl -w user.max_net_namespaces=<n> (it is 0 or exhausted)"
		}
		return c
	}
	c.Status, c.Message = StatusOK, "network namespaces supported: created and left one on a locked thread"
	return c
}

// CheckNetnsDir looks at the namespace directory's mounts in mountinfoPath
// (/proc/self/mountinfo). iproute2, podman and berth all make the
// directory a shared bind mount of itself, so that pins propagate to (and
// unmounts from) other mount namespaces. Two setups racing can stack two
// mounts on it; then unlinking a pin fails with EBUSY until both go.
func CheckNetnsDir(dir, mountinfoPath string) Check {
	c := Check{Name: "netns/dir"}
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Status = StatusOK
		c.Message = fmt.Sprintf("%s does not exist yet; berth creates it as a shared mount on first use", dir)
		return c
	case err != nil:
		c.Status, c.Message = StatusFail, fmt.Sprintf("netns dir %s: %v", dir, err)
		c.Fix = fmt.Sprintf("check the permissions of %s and its parents", dir)
		return c
	case !fi.IsDir():
		c.Status, c.Message = StatusFail, fmt.Sprintf("netns dir %s is not a directory", dir)
		c.Fix = fmt.Sprintf("remove %s (or pass --netns-dir); berth and `ip netns` need a directory there", dir)
		return c
	}
	mounts, err := evidence.ReadMountinfo(mountinfoPath)
	if err != nil {
		c.Status, c.Message = StatusFail, err.Error()
		c.Fix = "mount /proc"
		return c
	}
	var at []evidence.Mount
	for _, m := range mounts {
		if m.MountPoint == dir {
			at = append(at, m)
		}
	}
	switch {
	case len(at) == 0:
		c.Status = StatusOK
		c.Message = fmt.Sprintf("%s exists and is not a mount point yet; berth (like `ip netns add`) bind-mounts it onto itself as a shared mount on first use", dir)
	case len(at) > 1:
		c.Status = StatusFail
		c.Message = fmt.Sprintf("%d mounts are stacked on %s (two setups raced); removing a namespace there fails with EBUSY until all but one are gone", len(at), dir)
		c.Fix = fmt.Sprintf("with no workload using namespaces in %s, run `umount %s` %d time(s) until `grep ' %s ' /proc/self/mountinfo` shows one line (or unmount all of them and let `ip netns add` or berth re-create it)",
			dir, dir, len(at)-1, dir)
	default:
		// The last entry is the mount on top, the one new pins go into.
		top := at[len(at)-1]
		if !top.Shared() {
			c.Status = StatusWarn
			c.Message = fmt.Sprintf("%s is a mount point but not shared: namespaces pinned there do not propagate to other mount namespaces, and copies made there keep removed namespaces alive", dir)
			c.Fix = fmt.Sprintf("mount --make-shared %s", dir)
			return c
		}
		c.Status = StatusOK
		c.Message = fmt.Sprintf("%s is one shared mount (%s)", dir, top.Optional)
	}
	return c
}
