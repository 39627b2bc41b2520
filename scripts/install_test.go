// Tests of the install scripts: scripts/install.sh and scripts/uninstall.sh
// run into a scratch DESTDIR, never over the machine's own installation.
package scripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// runScript runs a script of this directory with env added to the test's
// environment and returns its combined output.
func runScript(t *testing.T, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash %s: %v\n%s", script, err, out.String())
	}
	return out.String()
}

// gitCommit is the commit install.sh should stamp: HEAD, "-dirty" when
// tracked files changed.
func gitCommit(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (git rev-parse HEAD: %v): the stamped commit cannot be checked", err)
	}
	commit := strings.TrimSpace(string(out))
	if exec.Command("git", "diff", "--quiet", "HEAD", "--").Run() != nil {
		commit += "-dirty"
	}
	return commit
}

func mtimes(t *testing.T, paths []string) map[string]time.Time {
	t.Helper()
	m := map[string]time.Time{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		testenv.Must(t, err)
		m[p] = fi.ModTime()
	}
	return m
}

// install.sh builds berth with the checkout's version and commit stamped
// in and installs it, its completions, the unit and the agent config
// under DESTDIR; a second run changes nothing; uninstall.sh removes all of
// it but what an operator edited, and says what it kept.
func TestInstallUninstall(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH: install.sh builds berth with it")
	}
	dest := t.TempDir()
	env := []string{
		"DESTDIR=" + dest,
		// No agent may answer for uninstall.sh to proceed; never ask the
		// machine's own.
		"BERTH_ADDR=unix://" + filepath.Join(dest, "none.sock"),
	}
	commit := gitCommit(t)
	runScript(t, "install.sh", env...)

	bin := filepath.Join(dest, "usr/local/bin/berth")
	bashComp := filepath.Join(dest, "usr/share/bash-completion/completions/berth")
	zshComp := filepath.Join(dest, "usr/share/zsh/vendor-completions/_berth")
	unit := filepath.Join(dest, "etc/systemd/system/berth.service")
	conf := filepath.Join(dest, "etc/berth/berth.hcl")
	supervisor := filepath.Join(dest, "usr/local/bin/berth-supervisor")
	fetcher := filepath.Join(dest, "usr/local/bin/berth-fetch")
	installed := []string{bin, supervisor, fetcher, bashComp, zshComp, unit, conf}

	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version", "--json").Output()
		testenv.Must(t, err)
		var v struct{ Version, Commit string }
		testenv.Must(t, json.Unmarshal(out, &v))
		if v.Commit != commit {
			t.Errorf("stamped commit %q, want %q", v.Commit, commit)
		}
		desc, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
		testenv.Must(t, err)
		if want := strings.TrimSpace(string(desc)); v.Version != want {
			t.Errorf("stamped version %q, want %q (git describe)", v.Version, want)
		}
		text, err := exec.Command(bin, "version").Output()
		testenv.Must(t, err)
		if !strings.Contains(string(text), "berth "+v.Version+"\n") || !strings.Contains(string(text), "commit "+commit+"\n") {
			t.Errorf("berth version printed %q", text)
		}
	})

	t.Run("bash completion", func(t *testing.T) {
		const lib = "/usr/share/bash-completion/bash_completion"
		if _, err := os.Stat(lib); err != nil {
			t.Skipf("%s missing: scripts/setup.sh installs bash-completion", lib)
		}
		// What bash-completion does on the first <TAB> after "berth ver":
		// load the file, call its function; it runs berth __complete.
		script := `. ` + lib + ` && . "$1" && COMP_WORDS=(berth ver) && COMP_CWORD=1 && COMP_LINE="berth ver" && COMP_POINT=${#COMP_LINE} && __start_berth berth ver berth && printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "-c", script, "bash", bashComp)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		testenv.Must(t, err)
		if strings.TrimSpace(string(out)) != "version" {
			t.Errorf("completing \"berth ver\" offered %q, want version", out)
		}
	})

	t.Run("zsh completion", func(t *testing.T) {
		b, err := os.ReadFile(zshComp)
		testenv.Must(t, err)
		if !bytes.HasPrefix(b, []byte("#compdef berth\n")) {
			t.Errorf("%s does not start with #compdef berth: %.40q", zshComp, b)
		}
	})

	t.Run("unit", func(t *testing.T) {
		b, err := os.ReadFile(unit)
		testenv.Must(t, err)
		if !strings.Contains(string(b), "ExecStart=/usr/local/bin/berth agent -config /etc/berth/berth.hcl\n") {
			t.Errorf("unit runs something else than the installed berth:\n%s", b)
		}
		if _, err := os.Stat(filepath.Join(dest, "etc/systemd/system/multi-user.target.wants/berth.service")); err == nil {
			t.Error("the unit was enabled")
		}
	})

	// The fetcher is its own program (not the supervisor): run by hand it
	// says what it is for and fails.
	t.Run("fetcher", func(t *testing.T) {
		out, err := exec.Command(fetcher).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "berth-fetch is started by berth") {
			t.Errorf("%s without arguments: %v\n%s", fetcher, err, out)
		}
	})

	t.Run("idempotent", func(t *testing.T) {
		before := mtimes(t, installed)
		out := runScript(t, "install.sh", env...)
		if after := mtimes(t, installed); !equalTimes(before, after) {
			t.Errorf("a second install rewrote files: before %v, after %v\n%s", before, after, out)
		}
	})

	// The operator edited the agent config; an unedited example network
	// and an edited one sit in the CNI config dir; no store exists.
	testenv.Must(t, os.WriteFile(conf, append(readFile(t, conf), "\n# edited\n"...), 0o644))
	cniDir := filepath.Join(dest, "etc/cni/net.d")
	testenv.Must(t, os.MkdirAll(cniDir, 0o755))
	shipped := filepath.Join(cniDir, "berth-private.conflist")
	testenv.Must(t, os.WriteFile(shipped, readFile(t, "../examples/cni/berth-private.conflist"), 0o644))
	plugins := filepath.Join(dest, "opt/berth/cni/bin")
	testenv.Must(t, os.MkdirAll(plugins, 0o755))
	testenv.Must(t, os.WriteFile(filepath.Join(plugins, ".berth-cni-version"), []byte("v1.10.0\n"), 0o644))

	out := runScript(t, "uninstall.sh", env...)
	for _, p := range []string{bin, supervisor, fetcher, bashComp, zshComp, unit, shipped, plugins} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("uninstall left %s\n%s", p, out)
		}
	}
	if _, err := os.Stat(conf); err != nil {
		t.Errorf("uninstall removed the edited %s: %v", conf, err)
	}
	if !strings.Contains(out, "kept:") || !strings.Contains(out, conf+" (edited)") {
		t.Errorf("uninstall does not say it kept %s:\n%s", conf, out)
	}
	// Again: nothing left to do, still fine.
	runScript(t, "uninstall.sh", env...)
}

// With berth's store present, uninstall keeps the CNI networks and
// plugins that the recorded attachments' teardowns need.
func TestUninstallKeepsWhatTheStoreNeeds(t *testing.T) {
	dest := t.TempDir()
	env := []string{"DESTDIR=" + dest, "BERTH_ADDR=unix://" + filepath.Join(dest, "none.sock")}
	data := filepath.Join(dest, "var/lib/berth")
	testenv.Must(t, os.MkdirAll(data, 0o700))
	testenv.Must(t, os.WriteFile(filepath.Join(data, "berth.db"), nil, 0o600))
	cniDir := filepath.Join(dest, "etc/cni/net.d")
	testenv.Must(t, os.MkdirAll(cniDir, 0o755))
	shipped := filepath.Join(cniDir, "berth-private.conflist")
	testenv.Must(t, os.WriteFile(shipped, readFile(t, "../examples/cni/berth-private.conflist"), 0o644))
	plugins := filepath.Join(dest, "opt/berth/cni/bin")
	testenv.Must(t, os.MkdirAll(plugins, 0o755))
	testenv.Must(t, os.WriteFile(filepath.Join(plugins, ".berth-cni-version"), []byte("v1.10.0\n"), 0o644))

	out := runScript(t, "uninstall.sh", env...)
	for _, p := range []string{shipped, plugins, data} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("uninstall removed %s: %v", p, err)
		}
		if !strings.Contains(out, p+" (berth") {
			t.Errorf("uninstall does not say it kept %s:\n%s", p, out)
		}
	}
}

func equalTimes(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !b[k].Equal(v) {
			return false
		}
	}
	return true
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	testenv.Must(t, err)
	return b
}
