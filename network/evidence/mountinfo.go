package evidence

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file (proc(5)):
//
//	id parent major:minor root mountpoint options [optional...] - fstype source superoptions
type Mount struct {
	ID, Parent int
	// Root is the mount's root within its filesystem; for a pinned
	// namespace (fstype nsfs) it is "net:[<inode>]".
	Root       string
	MountPoint string
	// Optional are the optional fields ("shared:5 master:1"), space-separated.
	Optional string
	FSType   string
	Source   string
}

// Shared reports whether the mount is in a shared peer group.
func (m Mount) Shared() bool { return strings.Contains(m.Optional, "shared:") }

// ReadMountinfo reads a mountinfo file (/proc/self/mountinfo,
// /proc/<pid>/mountinfo). Mounts are in the kernel's order: of two mounts
// on one path, the later is on top.
func ReadMountinfo(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return ParseMountinfo(b, path)
}

// ParseMountinfo parses mountinfo content; name is where it came from,
// for errors that give the line.
func ParseMountinfo(b []byte, name string) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("%s:%d: not a mountinfo line: %q", name, n, sc.Text())
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: bad mount IDs in %q", name, n, sc.Text())
		}
		out = append(out, Mount{
			ID:         id,
			Parent:     parent,
			Root:       unescapeOctal(f[3]),
			MountPoint: filepath.Clean(unescapeOctal(f[4])),
			Optional:   strings.Join(f[6:sep], " "),
			FSType:     f[sep+1],
			Source:     unescapeOctal(f[sep+2]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

// unescapeOctal undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
