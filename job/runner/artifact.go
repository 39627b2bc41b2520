package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth/berth/internal/beneath"
	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/task/artifact"
	"github.com/berth/berth/task/driver"
	"golang.org/x/sys/unix"
)

// ErrArtifact is matched (errors.Is) by every artifact that could not be
// fetched, checked or unpacked.
var ErrArtifact = artifact.ErrArtifact

func artifactErrorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrArtifact, fmt.Sprintf(format, a...))
}

// archiveExts are the archive kinds berth unpacks, by file name suffix,
// longest first; the same names are accepted by options { archive }.
var archiveExts = []struct{ suffix, kind string }{
	{".tar.gz", "tar.gz"}, {".tgz", "tar.gz"},
	{".tar.bz2", "tar.bz2"}, {".tbz2", "tar.bz2"},
	{".tar", "tar"}, {".zip", "zip"},
	{".gz", "gz"}, {".bz2", "bz2"},
}

// unsupportedHosts start go-getter sources berth cannot fetch: hosts its
// detectors turn into git, S3 or GCS sources.
var unsupportedHosts = []string{"github.com/", "gitlab.com/", "bitbucket.org/", "git@", "s3.amazonaws.com/", "storage.googleapis.com/"}

// artifactSource is an artifact's source resolved: a local path or an
// http(s) URL.
type artifactSource struct {
	local string   // a path on this machine, or ""
	url   *url.URL // an http or https URL, or nil
	name  string   // the file name the source ends with
}

func parseArtifactSource(src, taskDir string) (*artifactSource, error) {
	s := src
	if getter, rest, ok := strings.Cut(s, "::"); ok && !strings.Contains(getter, "/") {
		switch getter {
		case "file", "http", "https":
			s = rest
		default:
			return nil, artifactErrorf("source %q uses go-getter's %q getter, which berth does not have: berth fetches local paths, file:// and http(s):// URLs", src, getter)
		}
	}
	for _, h := range unsupportedHosts {
		if strings.HasPrefix(s, h) {
			return nil, artifactErrorf("source %q is fetched by go-getter with git, S3 or GCS, which berth does not have: use an http(s):// URL or a local path", src)
		}
	}
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && len(u.Scheme) > 1 {
		switch u.Scheme {
		case "http", "https":
			return &artifactSource{url: u, name: path.Base(u.Path)}, nil
		case "file":
			p := u.Path
			if u.Host != "" && u.Host != "localhost" {
				return nil, artifactErrorf("source %q names host %q: a file:// URL is of this machine (file:///path)", src, u.Host)
			}
			return &artifactSource{local: p, name: filepath.Base(p)}, nil
		default:
			return nil, artifactErrorf("source %q has scheme %q: berth fetches local paths, file:// and http(s):// URLs", src, u.Scheme)
		}
	}
	p := s
	if !filepath.IsAbs(p) {
		// go-getter's file paths are relative to the task directory.
		p = filepath.Join(taskDir, p)
	}
	return &artifactSource{local: p, name: filepath.Base(p)}, nil
}

// fetchArtifact fetches one artifact into the task dir taskDir, as Nomad's
// go-getter does for local files and http(s): the source (interpolated
// with the task's variables) is downloaded, its options.checksum checked,
// then placed by mode: "file" at the destination; "any" an archive unpacked
// into the destination, any other file into it under its own name; "dir"
// an archive unpacked or a directory copied into it.
//
// A local source (a path, a file:// URL) must lie inside the allocation
// directory. The runner only resolves and opens the source's and the
// destination's directories; the fetch itself runs sandboxed as the
// task's user (package artifact), so nothing outside the allocation is
// read, and nothing is written outside the destination nor through a
// symbolic link.
func (a *allocRun) fetchArtifact(ctx context.Context, taskDir string, art *jobspec.Artifact, vars map[string]string, cred driver.Credential) error {
	src, err := parseArtifactSource(jobspec.Interpolate(art.Source, vars), taskDir)
	if err != nil {
		return err
	}
	dest := jobspec.Interpolate(art.Destination, vars)
	destPath, err := securePath(a.dir, a.hostPath(taskDir, dest, vars))
	if err != nil {
		return artifactErrorf("destination %q: %v", dest, err)
	}
	opts := map[string]string{}
	for k, v := range art.Options {
		opts[k] = jobspec.Interpolate(v, vars)
	}
	kind, err := archiveKind(opts["archive"], src.name)
	if err != nil {
		return err
	}
	sumType, sum := art.ChecksumType, art.Checksum
	if sumType == "" && opts["checksum"] != "" {
		// Written with ${...}: read now that it is interpolated.
		if sumType, sum, err = jobspec.ParseChecksum(opts["checksum"], "artifact "+art.Source); err != nil {
			return fmt.Errorf("%w: %w", ErrArtifact, err)
		}
	}
	spec := artifact.Spec{
		AllocID: a.alloc.ID, Task: filepath.Base(taskDir), Source: art.Source, Name: src.name,
		Mode: art.Mode, Kind: kind, ChecksumType: sumType, Checksum: sum,
		UID: cred.UID, GID: cred.GID, Groups: cred.Groups,
		Landlock: a.r.landlockABI() > 0, Limits: a.r.o.ArtifactLimits,
	}
	destDir := destPath
	if art.Mode == "file" {
		destDir, spec.Target = filepath.Dir(destPath), filepath.Base(destPath)
	}

	root, err := openBeneath(-1, a.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("%w: allocation directory: %w", ErrArtifact, err)
	}
	defer root.Close()
	req := artifact.Request{OnProgress: func() { fault.Point(fault.ArtifactFetching) }}
	if src.local != "" {
		p := filepath.Clean(src.local)
		if !isUnder(a.dir, p) || p == filepath.Clean(a.dir) {
			return fmt.Errorf("%w: %s is not in it: name a file of the allocation (a path relative to the task directory, e.g. \"../alloc/data/app.tgz\") or fetch it over http(s)",
				ErrHostPath, p)
		}
		rel, _ := filepath.Rel(a.dir, filepath.Dir(p))
		sd, err := openBeneath(int(root.Fd()), rel, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrArtifact, filepath.Dir(p), beneathErr(err))
		}
		defer sd.Close()
		req.SrcDir, spec.LocalName = sd, filepath.Base(p)
	} else {
		u := *src.url
		q := u.Query()
		keys := make([]string, 0, len(opts))
		for k := range opts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			// Options other than archive and checksum are query
			// parameters, as go-getter sends them.
			if k != "archive" && k != "checksum" {
				q.Set(k, opts[k])
			}
		}
		u.RawQuery = q.Encode()
		spec.URL = u.String()
		spec.Headers = map[string]string{}
		for k, v := range art.Headers {
			spec.Headers[k] = jobspec.Interpolate(v, vars)
		}
	}
	if err := a.makeDestDir(destDir, cred); err != nil {
		return fmt.Errorf("%w: destination %q: %w", ErrArtifact, dest, err)
	}
	rel, _ := filepath.Rel(a.dir, destDir)
	dd, err := openBeneath(int(root.Fd()), rel, unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return fmt.Errorf("%w: destination %q: %w", ErrArtifact, dest, beneathErr(err))
	}
	defer dd.Close()
	req.DestDir, req.Spec = dd, spec
	return artifact.Fetch(ctx, req)
}

// ErrHostPath is matched by a local artifact source outside the
// allocation directory.
var ErrHostPath = fmt.Errorf("%w: local source outside the allocation directory", ErrArtifact)

func atPos(p jobspec.Pos) string {
	if p.Line == 0 {
		return ""
	}
	return " (" + p.String() + ")"
}

// openBeneath opens rel beneath the directory dirfd with openat2's
// resolve flags (dirfd -1: rel is an absolute path, opened not following
// a final link).
func openBeneath(dirfd int, rel string, flags uint64, resolve uint64) (*os.File, error) {
	if dirfd < 0 {
		fd, err := unix.Open(rel, int(flags)|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// beneathErr says what openat2's refusals mean here.
func beneathErr(err error) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w (a symbolic link leads out of the allocation directory)", err)
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w (berth does not write through a symbolic link)", err)
	}
	return err
}

// makeDestDir makes dir (inside the allocation directory) and gives the
// directories it made to the user the fetch runs as.
func (a *allocRun) makeDestDir(dir string, cred driver.Credential) error {
	if cred.UID == 0 {
		return mkdirAllUnder(a.dir, dir, nil)
	}
	return mkdirAllUnder(a.dir, dir, func(d *beneath.Dir, rel string) error {
		return d.ChownDir(rel, cred.UID, cred.GID)
	})
}

// archiveKind is what options { archive } says (false: none), else what the
// name's suffix says.
func archiveKind(opt, name string) (string, error) {
	switch opt {
	case "":
	case "false":
		return "", nil
	default:
		for _, e := range archiveExts {
			if e.kind == opt {
				return opt, nil
			}
		}
		var kinds []string
		for _, e := range archiveExts {
			kinds = append(kinds, e.kind)
		}
		return "", artifactErrorf("options { archive = %q } is not an archive kind berth unpacks (%s, or false)", opt, strings.Join(dedup(kinds), ", "))
	}
	lower := strings.ToLower(name)
	for _, e := range archiveExts {
		if strings.HasSuffix(lower, e.suffix) {
			return e.kind, nil
		}
	}
	if strings.HasSuffix(lower, ".xz") || strings.HasSuffix(lower, ".txz") || strings.HasSuffix(lower, ".zst") {
		return "", artifactErrorf("%s: xz and zstd archives are not unpacked by berth; use tar, tar.gz, tar.bz2 or zip, or options { archive = false }", name)
	}
	return "", nil
}

func dedup(l []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range l {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// isUnder reports whether p is root or lies inside it (lexically).
// hostPath is where a path a job names for task dir taskDir (an artifact's
// or a template's destination) is on the host: a host path inside the
// allocation as is ("${NOMAD_ALLOC_DIR}/x" of a task on the host); one
// under the task's own view of the shared dir ("/alloc/x" of an exec or
// podman task, vars' NOMAD_ALLOC_DIR) in the shared dir, where the task
// sees it; any other joined to the task dir ("local/x", "/local/x").
func (a *allocRun) hostPath(taskDir, p string, vars map[string]string) string {
	if filepath.IsAbs(p) && isUnder(a.dir, p) {
		return p
	}
	if seen := vars["NOMAD_ALLOC_DIR"]; filepath.IsAbs(p) && filepath.IsAbs(seen) && !isUnder(a.dir, seen) && isUnder(seen, p) {
		rel, _ := filepath.Rel(seen, p)
		return filepath.Join(driver.SharedDir(a.dir), rel)
	}
	return filepath.Join(taskDir, p)
}

func isUnder(root, p string) bool {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// securePath is p, cleaned, if it lies inside root and no existing part of
// it below root is a symbolic link.
func securePath(root, p string) (string, error) {
	root, p = filepath.Clean(root), filepath.Clean(p)
	if !isUnder(root, p) {
		return "", fmt.Errorf("%s is outside the allocation directory %s", p, root)
	}
	rel, _ := filepath.Rel(root, p)
	if rel == "." {
		return p, nil
	}
	cur := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s goes through the symbolic link %s", p, cur)
		}
	}
	return p, nil
}

// mkdirAllUnder is os.MkdirAll for a directory that must lie inside root,
// never made through a symbolic link (package beneath); made, if not nil,
// is called with each directory it made, relative to root.
func mkdirAllUnder(root, dir string, made func(d *beneath.Dir, rel string) error) error {
	dir, err := securePath(root, dir)
	if err != nil {
		return err
	}
	d, err := beneath.Open(root)
	if err != nil {
		return err
	}
	defer d.Close()
	rel, err := d.Rel(dir)
	if err != nil {
		return err
	}
	var onMade func(string) error
	if made != nil {
		onMade = func(rel string) error { return made(d, rel) }
	}
	return d.MkdirAll(rel, 0o755, onMade)
}

// replaceUnder writes data to p (inside root, its parents made) at once,
// never through a symbolic link, as a new file renamed over p (package
// beneath): a task that swaps a directory for a link between the checks
// and the write, or plants a link or hard link at p, sends nothing
// elsewhere.
func replaceUnder(root, p string, data []byte, mode os.FileMode, own beneath.Owner) error {
	p, err := securePath(root, p)
	if err != nil {
		return err
	}
	d, err := beneath.Open(root)
	if err != nil {
		return err
	}
	defer d.Close()
	rel, err := d.Rel(p)
	if err != nil {
		return err
	}
	if err := d.MkdirAll(filepath.Dir(rel), 0o755, nil); err != nil {
		return err
	}
	return d.ReplaceFile(rel, data, mode, own)
}
