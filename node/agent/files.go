package agent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is matched (errors.Is) by the refusal of a configuration,
// token or TLS file that is a symlink or not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// openRegular opens one of the agent's own files (its config, the token
// file, the TLS files) for reading. A FIFO there would block open(2) and
// read(2) forever, past SIGTERM: O_NONBLOCK makes the open return, and
// anything but a regular file is refused before it is read. A symlink is
// refused (O_NOFOLLOW): the checks of mode and owner must be those of the
// file the setting names, not of whatever a link points to later.
func openRegular(path, setting string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link (%w): the agent does not follow links for its configuration, token and TLS files; set %s to the file itself (`readlink -f %s`), or copy the file into place",
			path, ErrNotRegular, setting, path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file (it is %s; %w): set %s to a regular file", path, fileKind(st.Mode), ErrNotRegular, setting)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readBounded reads f to its end, refusing more than max bytes.
func readBounded(f *os.File, setting string, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes: is %s the right file?", f.Name(), max, setting)
	}
	return b, nil
}

// readRegular is openRegular and readBounded.
func readRegular(path, setting string, max int64) ([]byte, error) {
	f, err := openRegular(path, setting)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, setting, max)
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("of mode %#o", mode)
}
