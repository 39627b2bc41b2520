package runner

import (
	"archive/tar"
	"archive/zip"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/jobspec"
)

// ErrArtifact is matched (errors.Is) by every artifact that could not be
// fetched, checked or unpacked.
var ErrArtifact = errors.New("artifact failed")

func artifactErrorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrArtifact, fmt.Sprintf(format, a...))
}

// artifactTimeout bounds one HTTP download, as Nomad's default
// artifact.http_read_timeout.
const artifactTimeout = 30 * time.Minute

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
// an archive unpacked or a directory copied into it. Nothing is written
// outside the allocation directory, nor through a symbolic link.
func (a *allocRun) fetchArtifact(ctx context.Context, taskDir string, art *jobspec.Artifact, vars map[string]string) error {
	src, err := parseArtifactSource(jobspec.Interpolate(art.Source, vars), taskDir)
	if err != nil {
		return err
	}
	dest := jobspec.Interpolate(art.Destination, vars)
	destPath := filepath.Join(taskDir, dest)
	if filepath.IsAbs(dest) && isUnder(a.dir, dest) {
		// "${NOMAD_ALLOC_DIR}/..." as a task on the host sees it. As the
		// task of a container sees it ("/local/...") it is joined.
		destPath = dest
	}
	destPath, err = securePath(a.dir, destPath)
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

	if src.local != "" {
		fi, err := os.Stat(src.local)
		if err != nil {
			return artifactErrorf("%v", err)
		}
		if fi.IsDir() {
			if art.Mode == "file" {
				return artifactErrorf("%s is a directory and the artifact's mode is \"file\"", src.local)
			}
			if art.Checksum != "" {
				return artifactErrorf("%s is a directory: options { checksum } applies to a file", src.local)
			}
			return copyTree(a.dir, src.local, destPath)
		}
	}

	tmp, err := os.CreateTemp(taskDir, ".artifact-*")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := download(ctx, src, art.Headers, opts, vars, tmp); err != nil {
		return err
	}
	if art.Checksum != "" {
		if err := checkSum(tmp, art.ChecksumType, art.Checksum); err != nil {
			return err
		}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}

	switch {
	case art.Mode == "file" || (kind == "" && art.Mode == "any"):
		target := destPath
		if art.Mode != "file" {
			if err := mkdirAllUnder(a.dir, destPath); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
			name := src.name
			if name == "" || name == "." || name == "/" {
				return artifactErrorf("source %q ends with no file name to save it under: use mode = \"file\" and a destination file", art.Source)
			}
			target = filepath.Join(destPath, name)
		}
		if kind == "gz" || kind == "bz2" {
			// A compressed file is decompressed, as go-getter does: at the
			// destination file, or inside the destination without its suffix.
			if art.Mode != "file" {
				target = target[:len(target)-len(filepath.Ext(target))]
			}
			zr, err := decompressor(tmp, kind)
			if err != nil {
				return err
			}
			return copyFileUnder(a.dir, zr, target, 0o644)
		}
		return copyFileUnder(a.dir, tmp, target, 0o644)
	case kind == "":
		return artifactErrorf("mode \"dir\" needs an archive (tar, tar.gz, tar.bz2, zip) or a directory; %s is neither", src.name)
	}
	if err := mkdirAllUnder(a.dir, destPath); err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	return unpack(a.dir, tmp, kind, destPath)
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

// download copies the source into w. Options other than archive and
// checksum are query parameters of an http(s) URL, as go-getter sends them.
func download(ctx context.Context, src *artifactSource, headers, opts, vars map[string]string, w io.Writer) error {
	if src.local != "" {
		f, err := os.Open(src.local)
		if err != nil {
			return artifactErrorf("%v", err)
		}
		defer f.Close()
		if _, err := io.Copy(w, f); err != nil {
			return artifactErrorf("copy %s: %v", src.local, err)
		}
		return nil
	}
	u := *src.url
	q := u.Query()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "archive" && k != "checksum" {
			q.Set(k, opts[k])
		}
	}
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, artifactTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return artifactErrorf("%v", err)
	}
	req.Header.Set("User-Agent", "berth")
	for k, v := range headers {
		req.Header.Set(k, jobspec.Interpolate(v, vars))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return artifactErrorf("GET %s: %v", src.url.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return artifactErrorf("GET %s: %s", src.url.Redacted(), resp.Status)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return artifactErrorf("GET %s: reading the body: %v", src.url.Redacted(), err)
	}
	return nil
}

func checkSum(f *os.File, typ, want string) error {
	var h hash.Hash
	switch typ {
	case "md5":
		h = md5.New()
	case "sha1":
		h = sha1.New()
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return artifactErrorf("unsupported checksum type %q", typ)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return artifactErrorf("checksum mismatch: %s is %s, options { checksum } says %s", typ, got, want)
	}
	return nil
}

// isUnder reports whether p is root or lies inside it (lexically).
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
// not through a symbolic link.
func mkdirAllUnder(root, dir string) error {
	dir, err := securePath(root, dir)
	if err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}

// writeFileNoFollow writes data to p, which must not be a symbolic link.
func writeFileNoFollow(p string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyFileUnder writes r to target inside root with mode (parents made).
func copyFileUnder(root string, r io.Reader, target string, mode os.FileMode) error {
	target, err := securePath(root, target)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	if err := mkdirAllUnder(root, filepath.Dir(target)); err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return artifactErrorf("%s is a directory", target)
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("%w: write %s: %w", ErrArtifact, target, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func decompressor(r io.Reader, kind string) (io.Reader, error) {
	switch kind {
	case "gz", "tar.gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, artifactErrorf("not gzip data: %v", err)
		}
		return zr, nil
	case "bz2", "tar.bz2":
		return bzip2.NewReader(r), nil
	}
	return r, nil
}

// unpack unpacks the archive in f into dest, inside root.
func unpack(root string, f *os.File, kind, dest string) error {
	if kind == "zip" {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		zr, err := zip.NewReader(f, fi.Size())
		if err != nil {
			return artifactErrorf("not a zip archive: %v", err)
		}
		return unzip(root, zr, dest)
	}
	r, err := decompressor(f, kind)
	if err != nil {
		return err
	}
	return untar(root, tar.NewReader(r), dest)
}

// entryPath is where an archive entry goes: inside dest, or an error.
func entryPath(root, dest, name string) (string, error) {
	clean := path.Clean("/" + strings.ReplaceAll(name, "\\", "/"))
	if name == "" || strings.Contains(name, "\x00") {
		return "", artifactErrorf("archive entry %q has no usable name", name)
	}
	rel := strings.TrimPrefix(clean, "/")
	if rel == "" {
		return dest, nil
	}
	if orig := path.Clean(name); orig == ".." || strings.HasPrefix(orig, "../") || path.IsAbs(name) {
		return "", artifactErrorf("archive entry %q leads out of the destination", name)
	}
	p, err := securePath(root, filepath.Join(dest, filepath.FromSlash(rel)))
	if err != nil {
		return "", artifactErrorf("archive entry %q: %v", name, err)
	}
	return p, nil
}

// checkLink refuses a symbolic link whose target is absolute or leads
// out of dest.
func checkLink(dest, at, target string) error {
	if filepath.IsAbs(target) {
		return artifactErrorf("archive entry %s is a symbolic link to the absolute path %s", at, target)
	}
	resolved := filepath.Join(filepath.Dir(at), target)
	if rel, err := filepath.Rel(dest, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return artifactErrorf("archive entry %s is a symbolic link to %s, outside the destination", at, target)
	}
	return nil
}

func untar(root string, tr *tar.Reader, dest string) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return artifactErrorf("reading the archive: %v", err)
		}
		p, err := entryPath(root, dest, hdr.Name)
		if err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
			if mode != 0 {
				if err := os.Chmod(p, mode|0o700); err != nil {
					return err
				}
			}
		case tar.TypeReg:
			if err := copyFileUnder(root, tr, p, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := checkLink(dest, p, hdr.Linkname); err != nil {
				return err
			}
			if err := mkdirAllUnder(root, filepath.Dir(p)); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
			_ = os.Remove(p)
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
		case tar.TypeLink:
			target, err := entryPath(root, dest, hdr.Linkname)
			if err != nil {
				return err
			}
			_ = os.Remove(p)
			if err := os.Link(target, p); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
		default:
			return artifactErrorf("archive entry %q is a device, FIFO or other special file (type %q), which berth does not unpack", hdr.Name, hdr.Typeflag)
		}
	}
}

func unzip(root string, zr *zip.Reader, dest string) error {
	for _, zf := range zr.File {
		p, err := entryPath(root, dest, zf.Name)
		if err != nil {
			return err
		}
		mode := zf.Mode()
		switch {
		case mode.IsDir():
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
		case mode&fs.ModeSymlink != 0:
			rc, err := zf.Open()
			if err != nil {
				return artifactErrorf("zip entry %s: %v", zf.Name, err)
			}
			b, err := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			if err != nil {
				return artifactErrorf("zip entry %s: %v", zf.Name, err)
			}
			if err := checkLink(dest, p, string(b)); err != nil {
				return err
			}
			if err := mkdirAllUnder(root, filepath.Dir(p)); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
			_ = os.Remove(p)
			if err := os.Symlink(string(b), p); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
		case mode.IsRegular():
			rc, err := zf.Open()
			if err != nil {
				return artifactErrorf("zip entry %s: %v", zf.Name, err)
			}
			perm := mode.Perm()
			if perm == 0 {
				perm = 0o644
			}
			err = copyFileUnder(root, rc, p, perm)
			rc.Close()
			if err != nil {
				return err
			}
		default:
			return artifactErrorf("zip entry %q is a special file, which berth does not unpack", zf.Name)
		}
	}
	return nil
}

// copyTree copies the directory src into dest (inside root): regular
// files, directories and symbolic links that stay inside it.
func copyTree(root, src, dest string) error {
	if err := mkdirAllUnder(root, dest); err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return artifactErrorf("%v", err)
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		target := filepath.Join(dest, rel)
		fi, err := d.Info()
		if err != nil {
			return artifactErrorf("%v", err)
		}
		switch {
		case d.IsDir():
			return mkdirAllUnder(root, target)
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return artifactErrorf("%v", err)
			}
			if err := checkLink(dest, target, link); err != nil {
				return err
			}
			if _, err := securePath(root, target); err != nil {
				return fmt.Errorf("%w: %w", ErrArtifact, err)
			}
			_ = os.Remove(target)
			return os.Symlink(link, target)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return artifactErrorf("%v", err)
			}
			defer f.Close()
			return copyFileUnder(root, f, target, fi.Mode().Perm())
		}
		return artifactErrorf("%s is a special file, which berth does not copy", p)
	})
}
