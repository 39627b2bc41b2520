package artifact

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
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// fetcher is the work of the sandboxed child: src (a local file or
// directory handed over, or the URL) into the destination.
type fetcher struct {
	spec     *Spec
	dest     *dest
	srcDir   int    // the local source's directory (an O_PATH fd), -1 for a URL
	progress func() // told once, when the first bytes are in
}

func (f *fetcher) run(ctx context.Context) error {
	s := f.spec
	var data *os.File
	if s.URL == "" {
		fd, err := unix.Openat(f.srcDir, s.LocalName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				return errorf("%s is a symbolic link, which berth does not follow", s.Source)
			}
			return errorf("open %s: %v", s.Source, err)
		}
		src := os.NewFile(uintptr(fd), s.Source)
		defer src.Close()
		fi, err := src.Stat()
		if err != nil {
			return errorf("%v", err)
		}
		f.progress()
		switch {
		case fi.IsDir():
			if s.Mode == "file" {
				return errorf("%s is a directory and the artifact's mode is \"file\"", s.Source)
			}
			if s.Checksum != "" {
				return errorf("%s is a directory: options { checksum } applies to a file", s.Source)
			}
			return f.copyTree(ctx, fd, ".")
		case !fi.Mode().IsRegular():
			return errorf("%s is a special file, which berth does not copy", s.Source)
		}
		data = src
	} else {
		fd, err := tempFile(f.dest.dir.FD())
		if err != nil {
			return errorf("a temporary file in the destination: %v", err)
		}
		data = os.NewFile(uintptr(fd), "download")
		defer data.Close()
		if err := f.download(ctx, data); err != nil {
			return err
		}
	}
	if s.Checksum != "" {
		if err := checkSum(data, s.ChecksumType, s.Checksum); err != nil {
			return err
		}
	}
	if _, err := data.Seek(0, io.SeekStart); err != nil {
		return err
	}
	kind := s.Kind
	switch {
	case s.Mode == "file" || (kind == "" && s.Mode == "any"):
		target := s.Target
		if s.Mode != "file" {
			name := s.Name
			if name == "" || name == "." || name == "/" {
				return errorf("source %q ends with no file name to save it under: use mode = \"file\" and a destination file", s.Source)
			}
			target = name
		}
		if kind == "gz" || kind == "bz2" {
			// A compressed file is decompressed, as go-getter does: at the
			// destination file, or inside the destination without its suffix.
			if s.Mode != "file" {
				target = strings.TrimSuffix(target, path.Ext(target))
			}
			zr, err := decompressor(data, kind)
			if err != nil {
				return err
			}
			return f.dest.writeFile(target, zr, 0o644)
		}
		return f.dest.writeFile(target, data, 0o644)
	case kind == "":
		return errorf("mode \"dir\" needs an archive (tar, tar.gz, tar.bz2, zip) or a directory; %s is neither", s.Name)
	}
	return f.unpack(data, kind)
}

// download copies the URL's body into w, within http_max_size.
func (f *fetcher) download(ctx context.Context, w io.Writer) error {
	s := f.spec
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return errorf("%v", err)
	}
	shown := req.URL.Redacted()
	req.Header.Set("User-Agent", "berth")
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	// No proxy from the environment (the child has none), redirects
	// followed as go-getter's.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	resp, err := client.Do(req)
	if err != nil {
		return errorf("GET %s: %v", shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorf("GET %s: %s", shown, resp.Status)
	}
	max := s.Limits.HTTPMaxSize
	if resp.ContentLength > max {
		return fmt.Errorf("%w: GET %s: %d bytes, more than http_max_size (%d bytes)", ErrLimit, shown, resp.ContentLength, max)
	}
	buf := make([]byte, 64<<10)
	var n int64
	told := false
	for {
		m, rerr := resp.Body.Read(buf)
		if m > 0 {
			n += int64(m)
			if n > max {
				return fmt.Errorf("%w: GET %s: more than http_max_size (%d bytes)", ErrLimit, shown, max)
			}
			if _, err := w.Write(buf[:m]); err != nil {
				return errorf("GET %s: writing: %v", shown, err)
			}
			if !told {
				told = true
				f.progress()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return errorf("GET %s: reading the body: %v", shown, rerr)
		}
	}
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
		return errorf("unsupported checksum type %q", typ)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errorf("checksum mismatch: %s is %s, options { checksum } says %s", typ, got, want)
	}
	return nil
}

func decompressor(r io.Reader, kind string) (io.Reader, error) {
	switch kind {
	case "gz", "tar.gz":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, errorf("not gzip data: %v", err)
		}
		return zr, nil
	case "bz2", "tar.bz2":
		return bzip2.NewReader(r), nil
	}
	return r, nil
}

// unpack unpacks the archive in data into the destination.
func (f *fetcher) unpack(data *os.File, kind string) error {
	if kind == "zip" {
		fi, err := data.Stat()
		if err != nil {
			return err
		}
		zr, err := zip.NewReader(data, fi.Size())
		if err != nil {
			return errorf("not a zip archive: %v", err)
		}
		return f.unzip(zr)
	}
	r, err := decompressor(data, kind)
	if err != nil {
		return err
	}
	return f.untar(tar.NewReader(r))
}

func wrap(err error) error {
	if err == nil || errors.Is(err, ErrArtifact) || errors.Is(err, ErrLimit) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrArtifact, err)
}

func (f *fetcher) untar(tr *tar.Reader) error {
	d := f.dest
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return errorf("reading the archive: %v", err)
		}
		rel, err := entryRel(hdr.Name)
		if err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := d.mkdirAll(rel); err != nil {
				return wrap(err)
			}
			if mode != 0 {
				if err := d.chmodDir(rel, mode|0o700); err != nil {
					return wrap(err)
				}
			}
		case tar.TypeReg:
			if err := d.writeFile(rel, tr, mode); err != nil {
				return wrap(err)
			}
		case tar.TypeSymlink:
			if err := checkLink(rel, hdr.Linkname); err != nil {
				return err
			}
			if err := d.symlink(rel, hdr.Linkname); err != nil {
				return wrap(err)
			}
		case tar.TypeLink:
			old, err := entryRel(hdr.Linkname)
			if err != nil {
				return err
			}
			if err := d.link(old, rel); err != nil {
				return wrap(err)
			}
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
		default:
			return errorf("archive entry %q is a device, FIFO or other special file (type %q), which berth does not unpack", hdr.Name, hdr.Typeflag)
		}
	}
}

func (f *fetcher) unzip(zr *zip.Reader) error {
	d := f.dest
	if len(zr.File) > f.spec.Limits.DecompressionFileCountLimit {
		return fmt.Errorf("%w: %d zip entries, more than decompression_file_count_limit (%d)", ErrLimit, len(zr.File), f.spec.Limits.DecompressionFileCountLimit)
	}
	for _, zf := range zr.File {
		rel, err := entryRel(zf.Name)
		if err != nil {
			return err
		}
		mode := zf.Mode()
		switch {
		case mode.IsDir():
			if err := d.mkdirAll(rel); err != nil {
				return wrap(err)
			}
		case mode&fs.ModeSymlink != 0:
			rc, err := zf.Open()
			if err != nil {
				return errorf("zip entry %s: %v", zf.Name, err)
			}
			b, err := io.ReadAll(io.LimitReader(rc, 4096))
			rc.Close()
			if err != nil {
				return errorf("zip entry %s: %v", zf.Name, err)
			}
			if err := checkLink(rel, string(b)); err != nil {
				return err
			}
			if err := d.symlink(rel, string(b)); err != nil {
				return wrap(err)
			}
		case mode.IsRegular():
			rc, err := zf.Open()
			if err != nil {
				return errorf("zip entry %s: %v", zf.Name, err)
			}
			perm := mode.Perm()
			if perm == 0 {
				perm = 0o644
			}
			err = d.writeFile(rel, rc, perm)
			rc.Close()
			if err != nil {
				return wrap(err)
			}
		default:
			return errorf("zip entry %q is a special file, which berth does not unpack", zf.Name)
		}
	}
	return nil
}

// copyTree copies the directory open at dirfd into rel of the
// destination: regular files, directories and symbolic links that stay
// inside it, read as the task's user, never following a link.
func (f *fetcher) copyTree(ctx context.Context, dirfd int, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.dest.mkdirAll(rel); err != nil {
		return wrap(err)
	}
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return errorf("%v", err)
	}
	dir := os.NewFile(uintptr(dup), rel)
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return errorf("read %s: %v", path.Join(f.spec.Source, rel), err)
	}
	for _, name := range names {
		at := path.Join(rel, name)
		shown := path.Join(f.spec.Source, at)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errorf("%s: %v", shown, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return errorf("%s: %v", shown, err)
			}
			err = f.copyTree(ctx, fd, at)
			unix.Close(fd)
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, 4096)
			n, err := unix.Readlinkat(dirfd, name, buf)
			if err != nil {
				return errorf("%s: %v", shown, err)
			}
			target := string(buf[:n])
			if err := checkLink(at, target); err != nil {
				return err
			}
			if err := f.dest.symlink(at, target); err != nil {
				return wrap(err)
			}
		case unix.S_IFREG:
			fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return errorf("%s: %v", shown, err)
			}
			src := os.NewFile(uintptr(fd), shown)
			err = f.dest.writeFile(at, src, os.FileMode(st.Mode&0o777))
			src.Close()
			if err != nil {
				return wrap(err)
			}
		default:
			return errorf("%s is a special file, which berth does not copy", shown)
		}
	}
	return nil
}

// tempFile is an unnamed file in the directory dirfd, so that nothing of a
// cut download stays: O_TMPFILE, or where the filesystem lacks it a file
// unlinked as soon as it is made.
func tempFile(dirfd int) (int, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil || !(errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)) {
		return fd, err
	}
	name := fmt.Sprintf(".artifact-%d", os.Getpid())
	fd, err = unix.Openat(dirfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	if err := unix.Unlinkat(dirfd, name, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
