package supervisor

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// onThrowawayThread runs f on an OS thread of its own that is thrown
// away afterwards (a goroutine that ends locked ends its thread): f may
// change the thread's credentials, seccomp filter, root and mount
// namespace without reaching the rest of the test process.
func onThrowawayThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		f()
	}()
	<-done
}

// Each credential step, taken by a thread as the init and enter take it:
// users and groups (setIDs), the bounding set, the capability sets,
// ambient capabilities for another user, seccomp and no_new_privs.
func TestStepCredsApply(t *testing.T) {
	needRoot(t)
	full, bnd := allCaps(t), ownBounding(t)
	for _, tc := range []struct {
		name string
		c    creds
		want map[string]string
	}{
		{"nothing", creds{}, map[string]string{"Uid": "0\t0\t0\t0", "CapEff": full, "CapBnd": bnd, "Seccomp": "0", "NoNewPrivs": "0"}},
		{"user and groups", creds{setUser: true, uid: 65534, gid: 100, groups: []int{27, 100}}, map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "Gid": "100\t100\t100\t100", "Groups": "27 100", "CapEff": capHex(), "CapPrm": capHex(), "CapBnd": bnd}},
		{"capabilities of a user", creds{setUser: true, uid: 65534, gid: 65534, setCaps: true, bounding: 1 << 10, keep: 1 << 10}, map[string]string{
			"Uid": "65534\t65534\t65534\t65534", "CapBnd": capHex(10), "CapEff": capHex(10), "CapPrm": capHex(10), "CapInh": capHex(10), "CapAmb": capHex(10)}},
		{"capabilities of root", creds{setCaps: true, bounding: 1<<0 | 1<<12, keep: 1 << 12}, map[string]string{
			"Uid": "0\t0\t0\t0", "CapBnd": capHex(0, 12), "CapEff": capHex(12), "CapPrm": capHex(12), "CapInh": capHex(12), "CapAmb": capHex()}},
		{"seccomp and no_new_privs", creds{seccomp: true, noNewPrivs: true}, map[string]string{"Seccomp": "2", "NoNewPrivs": "1", "CapEff": full}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var status map[string]string
			var err error
			onThrowawayThread(func() {
				if err = tc.c.apply(); err != nil {
					return
				}
				var b []byte
				b, err = os.ReadFile("/proc/thread-self/status")
				status = procStatus(string(b))
			})
			if err != nil {
				t.Fatal(err)
			}
			checkStatus(t, "the thread", status, tc.want)
		})
	}
}

// Credentials.take drops what the supervisor itself does not have.
func TestStepCredentialsTake(t *testing.T) {
	needRoot(t)
	var status map[string]string
	var err error
	onThrowawayThread(func() {
		id := Credentials{SetUser: true, UID: 65534, GID: 65534, SetCaps: true, Caps: []int{unix.CAP_NET_RAW, 63, -1}, Seccomp: true}
		if err = id.take(); err != nil {
			return
		}
		var b []byte
		b, err = os.ReadFile("/proc/thread-self/status")
		status = procStatus(string(b))
	})
	if err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "the thread", status, map[string]string{"CapBnd": capHex(unix.CAP_NET_RAW), "CapAmb": capHex(unix.CAP_NET_RAW), "Seccomp": "2"})
}

// makeRoot, step by step, on a thread in a mount namespace of its own:
// the pivot (the new root's marker is there, the host's tree is not), the
// private /proc and /dev, and the bind mounts with their options.
func TestStepMakeRoot(t *testing.T) {
	needRoot(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "file"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp, _ := rootSpec(t, src)
	sp.Mounts = append(sp.Mounts, Mount{Source: filepath.Join(src, "file"), Dest: "/etc/one-file", ReadOnly: true})
	var (
		err     error
		mounts  []mountInfo
		dev     []string
		marker  error
		host    error
		roWrite error
		cwd     string
	)
	onThrowawayThread(func() {
		if err = unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			return
		}
		if err = makeRoot(sp); err != nil {
			return
		}
		var b []byte
		if b, err = os.ReadFile("/proc/thread-self/mountinfo"); err != nil {
			return
		}
		mounts = parseMountInfo(string(b))
		ents, _ := os.ReadDir("/dev")
		for _, e := range ents {
			dev = append(dev, e.Name())
		}
		_, marker = os.Stat("/marker")
		_, host = os.Stat(src)
		roWrite = os.WriteFile("/etc/one-file", []byte("x"), 0)
		cwd, _ = os.Getwd()
	})
	if err != nil {
		t.Fatal(err)
	}
	if marker != nil || !errors.Is(host, os.ErrNotExist) || cwd != "/" {
		t.Errorf("after the pivot: /marker %v, the host's %s %v, cwd %q", marker, src, host, cwd)
	}
	if !errors.Is(roWrite, unix.EROFS) {
		t.Errorf("writing a read-only bound file: %v", roWrite)
	}
	wantDev := append(slices.Clone(devices), "fd", "stdin", "stdout", "stderr", "shm", "pts", "ptmx", "mqueue")
	slices.Sort(wantDev)
	if !slices.Equal(dev, wantDev) {
		t.Errorf("/dev holds %v, want %v", dev, wantDev)
	}
	checkMounts(t, slices.DeleteFunc(mounts, func(m mountInfo) bool { return m.Point == "/etc/one-file" }))
}

func TestStepInRoot(t *testing.T) {
	for _, tc := range []struct{ dest, want, err string }{
		{"/alloc", "/r/alloc", ""},
		{"alloc/x", "/r/alloc/x", ""},
		{"/../../etc", "/r/etc", ""},
		{"/", "", "is the root itself"},
		{"/a/..", "", "is the root itself"},
	} {
		got, err := inRoot("/r", tc.dest)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("inRoot(%q) = %q, %v; want %q, %q", tc.dest, got, err, tc.want, tc.err)
		}
	}
}

func TestStepMountPoint(t *testing.T) {
	dir := t.TempDir()
	if err := mountPoint(filepath.Join(dir, "a/b/dir"), true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a/b/dir")); err != nil || !fi.IsDir() {
		t.Errorf("directory mount point: %v", err)
	}
	if err := mountPoint(filepath.Join(dir, "c/file"), false); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "c/file")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("file mount point: %v", err)
	}
	// An existing one is used as it is.
	if err := mountPoint(filepath.Join(dir, "c/file"), false); err != nil {
		t.Errorf("existing mount point: %v", err)
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := mountPoint(filepath.Join(dir, "link"), true); err == nil || !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("a symlink as mount point: %v", err)
	}
}

// A link in a directory below the root (one the task writes, such as
// local/) is refused: the mount, and the directories made for it, would
// land outside the root.
func TestStepNoLinkBelow(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "local/real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "local/link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ target, err string }{
		{"local/real/data", ""},
		{"local/new/deeper/data", ""},
		{"data", ""},
		{"local/link/data", "local/link is a symlink"},
		{"local/link/x/data", "local/link is a symlink"},
	} {
		err := noLinkBelow(root, filepath.Join(root, tc.target))
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("noLinkBelow(%s) = %v, want %q", tc.target, err, tc.err)
		}
	}
}

func TestStepLookPath(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"tool": 0o755, "data": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := []string{"PATH=/nonexistent:" + dir}
	for _, tc := range []struct {
		name string
		env  []string
		want string
		err  error
	}{
		{"tool", path, filepath.Join(dir, "tool"), nil},
		{"./relative/tool", path, "./relative/tool", nil},
		{"data", path, "", errNotInPath},
		{"sub", path, "", errNotInPath},
		{"tool", nil, "", errNotInPath},
		{"sh", nil, "", nil},
	} {
		got, err := lookPath(tc.name, tc.env)
		if tc.name == "sh" {
			// The default PATH, when the environment has none.
			if err != nil || !strings.HasSuffix(got, "/sh") {
				t.Errorf("lookPath(sh) = %q, %v", got, err)
			}
			continue
		}
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("lookPath(%q, %v) = %q, %v; want %q, %v", tc.name, tc.env, got, err, tc.want, tc.err)
		}
	}
}

func TestStepExecFailure(t *testing.T) {
	for err, want := range map[error]int{
		unix.ENOENT: EnterNotFound, unix.ENOTDIR: EnterNotFound, errNotInPath: EnterNotFound,
		unix.EACCES: EnterNotExecutable, unix.ENOEXEC: EnterNotExecutable, unix.EISDIR: EnterNotExecutable,
	} {
		if got := execFailure(err); got != want {
			t.Errorf("execFailure(%v) = %d, want %d", err, got, want)
		}
	}
}

func TestStepCloneFlags(t *testing.T) {
	for _, tc := range []struct {
		sp   Spec
		want uintptr
	}{
		{Spec{}, 0},
		{Spec{Root: "/r"}, unix.CLONE_NEWNS},
		{Spec{Root: "/r", NewPIDNS: true, NewIPCNS: true}, unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC},
		{Spec{NewPIDNS: true}, unix.CLONE_NEWPID},
	} {
		if got := tc.sp.cloneFlags(); got != tc.want {
			t.Errorf("cloneFlags(%+v) = %#x, want %#x", tc.sp, got, tc.want)
		}
	}
}

// The status is replaced whole: a leftover temporary file of a
// supervisor that died mid-write is removed first.
func TestStepWriteStatus(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".t.status.tmp"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first\n", "second\n"} {
		if err := writeStatus(dir, "t.status", []byte(body)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "t.status")); err != nil || string(b) != body {
			t.Errorf("status %q, %v; want %q", b, err, body)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left in the directory: %v", ents)
	}
	if err := writeStatus(filepath.Join(dir, "missing"), "t.status", nil); err == nil {
		t.Error("wrote into a missing directory")
	}
}

// readFD reads a memfd whole from its start, however far it was read.
func TestStepReadFD(t *testing.T) {
	fd, err := unix.MemfdCreate("spec", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd: %v", err)
	}
	f := os.NewFile(uintptr(fd), "spec")
	defer f.Close()
	want := bytes.Repeat([]byte("0123456789"), 20000)
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := readFD(fd)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("readFD: %d bytes, %v; want %d", len(got), err, len(want))
		}
	}
	if _, err := readFD(-1); err == nil {
		t.Error("read a closed descriptor")
	}
}

func TestStepReadAll(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	if _, err := unix.Write(p[1], []byte("exec /x: no such file")); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[1])
	if got := readAll(p[0]); got != "exec /x: no such file" {
		t.Errorf("readAll = %q", got)
	}
}

func TestStepMainUsage(t *testing.T) {
	if got := Main([]string{Binary}); got != 2 {
		t.Errorf("Main without a command = %d, want 2", got)
	}
	if got := Main([]string{Binary, "help"}); got != 2 {
		t.Errorf("Main help = %d, want 2", got)
	}
}

func TestStepAttrName(t *testing.T) {
	if attrName(true) != "read-only, nosuid, nodev" || attrName(false) != "nosuid, nodev" {
		t.Errorf("attrName: %q %q", attrName(true), attrName(false))
	}
}

// What a record that is not well formed says.
func TestCodecErrors(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join("testdata", "spec-raw.golden"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, record, want string
		parse              func([]byte) error
	}{
		{"spec: mount_dst first", string(spec) + "mount_dst \"/x\"\n", "task spec: mount_dst before mount_src", parseSpec},
		{"spec: mount_ro first", string(spec) + "mount_ro \"true\"\n", "task spec: mount_ro before mount_src", parseSpec},
		{"spec: a bad number", string(spec) + "log_max_size \"big\"\n", "task spec: log_max_size: strconv.ParseInt", parseSpec},
		{"spec: a bad uid", string(spec) + "uid \"-x\"\n", "task spec: uid: strconv.Atoi", parseSpec},
		{"spec: no value", "version\n", "task spec: line 1: no value", parseSpec},
		{"spec: bad quoting", "version 1\n", "task spec: line 1 (version): invalid syntax", parseSpec},
		{"spec: no binary", "version \"1\"\nstatus_dir \"/d\"\nstatus_name \"s\"\n", "task spec: no binary", parseSpec},
		{"spec: no status file", "version \"1\"\npath \"/x\"\narg \"x\"\n", "task spec: no status file", parseSpec},
		{"spec: no version", "path \"/x\"\n", "task spec version 0", parseSpec},
		{"status: another version", "version \"2\"\n", "task status version 2, want 1", parseStatus},
		{"status: a bad time", "version \"1\"\nstarted_at \"noon\"\n", "task status: started_at", parseStatus},
		{"status: a bad start", "version \"1\"\npid_start \"-1\"\n", "task status: pid_start", parseStatus},
		{"enter: another version", "version \"7\"\narg \"id\"\n", "enter spec version 7", parseEnter},
		{"enter: a bad cap", "version \"1\"\narg \"id\"\ncap \"ten\"\n", "enter spec: cap", parseEnter},
		{"enter: no command", "version \"1\"\n", "enter spec: no command", parseEnter},
		{"enter: bad quoting", "arg x\n", "enter spec: line 1 (arg)", parseEnter},
	} {
		if err := tc.parse([]byte(tc.record)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func parseSpec(b []byte) error   { _, err := ParseSpec(b); return err }
func parseStatus(b []byte) error { _, err := ParseStatus(b); return err }
func parseEnter(b []byte) error  { _, err := ParseEnterSpec(b); return err }

// The enter spec's flags are read as their value, the task spec's as
// present.
func TestCodecFlags(t *testing.T) {
	es, err := ParseEnterSpec([]byte("version \"1\"\narg \"id\"\nnet \"false\"\nmnt \"true\"\n"))
	if err != nil || es.Net || !es.Mnt {
		t.Errorf("enter flags: %+v, %v", es, err)
	}
	sp, err := ParseSpec([]byte("version \"1\"\npath \"/x\"\narg \"x\"\nstatus_dir \"/d\"\nstatus_name \"s\"\nnewpid \"\"\n"))
	if err != nil || !sp.NewPIDNS {
		t.Errorf("spec flag: %+v, %v", sp, err)
	}
}

func TestParseReadyErrors(t *testing.T) {
	for _, line := range []string{"", "hello\n", "ok x 7\n", "ok 42 -1\n", "ok 42\n"} {
		if _, _, err := ParseReady(line); err == nil {
			t.Errorf("ParseReady(%q) took it", line)
		}
	}
	// An error that is not quoted is taken as it is.
	if _, _, err := ParseReady("err plain words\n"); err == nil || err.Error() != "plain words" {
		t.Errorf("ParseReady(err unquoted) = %v", err)
	}
}

func TestStepFind(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Find(exe); err != nil || got != exe {
		t.Errorf("Find(%s) = %q, %v", exe, got, err)
	}
	t.Setenv(PathEnv, exe)
	if got, err := Find(""); err != nil || got != exe {
		t.Errorf("Find with $%s = %q, %v", PathEnv, got, err)
	}
	t.Setenv(PathEnv, "")
	t.Setenv("PATH", t.TempDir())
	if _, err := Find(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find of nothing: %v", err)
	}
}
