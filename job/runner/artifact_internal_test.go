package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseArtifactSource(t *testing.T) {
	for _, tc := range []struct {
		src, local, url, name, err string
	}{
		{src: "/opt/x.tar.gz", local: "/opt/x.tar.gz", name: "x.tar.gz"},
		{src: "local/conf.yml", local: "/task/local/conf.yml", name: "conf.yml"},
		{src: "file:///srv/a.zip", local: "/srv/a.zip", name: "a.zip"},
		{src: "file::/srv/a.zip", local: "/srv/a.zip", name: "a.zip"},
		{src: "https://example.com/dl/tool.tgz?x=1", url: "https://example.com/dl/tool.tgz?x=1", name: "tool.tgz"},
		{src: "http::http://127.0.0.1:8080/f", url: "http://127.0.0.1:8080/f", name: "f"},
		{src: "git::https://example.com/r.git", err: `go-getter's "git" getter`},
		{src: "github.com/hashicorp/nomad", err: "git, S3 or GCS"},
		{src: "s3://bucket/key", err: `scheme "s3"`},
		{src: "file://otherhost/x", err: `names host "otherhost"`},
	} {
		s, err := parseArtifactSource(tc.src, "/task")
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.src, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.src, err)
		default:
			u := ""
			if s.url != nil {
				u = s.url.String()
			}
			if s.local != tc.local || u != tc.url || s.name != tc.name {
				t.Errorf("%s: local %q url %q name %q", tc.src, s.local, u, s.name)
			}
		}
	}
}

func TestArchiveKind(t *testing.T) {
	for _, tc := range []struct {
		opt, name, want, err string
	}{
		{name: "a.tar.gz", want: "tar.gz"},
		{name: "A.TGZ", want: "tar.gz"},
		{name: "a.tar", want: "tar"},
		{name: "a.zip", want: "zip"},
		{name: "a.tbz2", want: "tar.bz2"},
		{name: "a.gz", want: "gz"},
		{name: "a.txt", want: ""},
		{opt: "false", name: "a.zip", want: ""},
		{opt: "zip", name: "download", want: "zip"},
		{opt: "rar", name: "a", err: "not an archive kind"},
		{name: "a.tar.xz", err: "xz and zstd archives are not unpacked"},
	} {
		got, err := archiveKind(tc.opt, tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s/%s: %v, want %q", tc.opt, tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s/%s: %q %v, want %q", tc.opt, tc.name, got, err, tc.want)
		}
	}
}

// Nothing of a path lands outside the allocation dir.
func TestSecurePath(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "t", "local"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "t", "local", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := securePath(root, filepath.Join(root, "..", "x")); err == nil {
		t.Error("a path outside the root was accepted")
	}
	if _, err := securePath(root, filepath.Join(root, "t", "local", "link", "passwd")); err == nil || !strings.Contains(err.Error(), "goes through the symbolic link") {
		t.Errorf("a path through a link: %v", err)
	}
}

// A destination is placed where the task sees it, whichever view of its
// directories it was written in.
func TestHostPath(t *testing.T) {
	a := &allocRun{dir: "/data/alloc/a1"}
	td := "/data/alloc/a1/web"
	host := map[string]string{"NOMAD_ALLOC_DIR": "/data/alloc/a1/alloc"}
	inRoot := map[string]string{"NOMAD_ALLOC_DIR": "/alloc"}
	for _, tc := range []struct {
		p    string
		vars map[string]string
		want string
	}{
		{"local/x", host, "/data/alloc/a1/web/local/x"},
		{"/data/alloc/a1/alloc/x", host, "/data/alloc/a1/alloc/x"},
		{"/alloc/x", host, "/data/alloc/a1/web/alloc/x"},
		{"/local/x", inRoot, "/data/alloc/a1/web/local/x"},
		{"/alloc/data/x", inRoot, "/data/alloc/a1/alloc/data/x"},
		{"/alloc", inRoot, "/data/alloc/a1/alloc"},
		{"/allocx/y", inRoot, "/data/alloc/a1/web/allocx/y"},
		{"/alloc/../../etc", inRoot, "/data/alloc/a1/etc"}, // joined; securePath keeps it in the allocation
	} {
		if got := a.hostPath(td, tc.p, tc.vars); got != tc.want {
			t.Errorf("hostPath(%q, NOMAD_ALLOC_DIR=%s) = %q, want %q", tc.p, tc.vars["NOMAD_ALLOC_DIR"], got, tc.want)
		}
	}
}
