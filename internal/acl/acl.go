// Package acl grants one user search (execute) permission on a directory
// through a POSIX access ACL (the system.posix_acl_access attribute,
// written directly: no libacl, no setfacl), so that a task's user can
// reach its own directories beneath root-owned ones that stay closed to
// every other local user.
package acl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

const xattr = "system.posix_acl_access"

// The ACL's binary form (linux/posix_acl_xattr.h).
const (
	version     = 2
	tagUserObj  = 0x01
	tagUser     = 0x02
	tagGroupObj = 0x04
	tagGroup    = 0x08
	tagMask     = 0x10
	tagOther    = 0x20
	undefinedID = 0xffffffff
	permX       = 0x1
)

// ErrUnsupported is returned when the directory's filesystem has no ACLs.
var ErrUnsupported = errors.New("the filesystem does not support POSIX ACLs")

type entry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// GrantSearch lets uid search (traverse) dir: a named-user entry with
// execute, added to the directory's ACL (or to one made from its mode).
// Owner and other bits are untouched; the group class's mask becomes what
// the owning group and the named entries have, so the owning group gains
// nothing. A uid that may search dir already (its owner, or any user
// through the other bits) is left alone. dir is not followed if it is a
// symlink.
func GrantSearch(dir string, uid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("grant uid %d search on %s: %w", uid, dir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("grant uid %d search on %s: %w", uid, dir, err)
	}
	if st.Mode&0o001 != 0 || (int(st.Uid) == uid && st.Mode&0o100 != 0) {
		return nil
	}
	entries, err := read(fd, st.Mode)
	if err != nil {
		return fmt.Errorf("grant uid %d search on %s: %w", uid, dir, err)
	}
	entries = withSearch(entries, uint32(uid))
	if err := unix.Fsetxattr(fd, xattr, encode(entries), 0); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = ErrUnsupported
		}
		return fmt.Errorf("grant uid %d search on %s: %w", uid, dir, err)
	}
	return nil
}

// read is the directory's access ACL, or the one its mode stands for.
func read(fd int, mode uint32) ([]entry, error) {
	buf := make([]byte, 4096)
	n, err := unix.Fgetxattr(fd, xattr, buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return []entry{
			{tagUserObj, uint16(mode >> 6 & 7), undefinedID},
			{tagGroupObj, uint16(mode >> 3 & 7), undefinedID},
			{tagOther, uint16(mode & 7), undefinedID},
		}, nil
	case errors.Is(err, unix.EOPNOTSUPP):
		return nil, ErrUnsupported
	case err != nil:
		return nil, err
	}
	return decode(buf[:n])
}

func decode(b []byte) ([]entry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 || binary.LittleEndian.Uint32(b) != version {
		return nil, fmt.Errorf("unreadable ACL (%d bytes)", len(b))
	}
	var out []entry
	for p := 4; p < len(b); p += 8 {
		out = append(out, entry{
			tag:  binary.LittleEndian.Uint16(b[p:]),
			perm: binary.LittleEndian.Uint16(b[p+2:]),
			id:   binary.LittleEndian.Uint32(b[p+4:]),
		})
	}
	return out, nil
}

func encode(es []entry) []byte {
	b := make([]byte, 4, 4+8*len(es))
	binary.LittleEndian.PutUint32(b, version)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// withSearch adds execute for uid and recomputes the mask, in the order
// the kernel wants (by tag, then id).
func withSearch(es []entry, uid uint32) []entry {
	found := false
	var mask uint16
	out := es[:0:0]
	for _, e := range es {
		switch e.tag {
		case tagMask:
			continue
		case tagUser:
			if e.id == uid {
				e.perm |= permX
				found = true
			}
		}
		if e.tag == tagUser || e.tag == tagGroup || e.tag == tagGroupObj {
			mask |= e.perm
		}
		out = append(out, e)
	}
	if !found {
		out = append(out, entry{tagUser, permX, uid})
		mask |= permX
	}
	out = append(out, entry{tagMask, mask, undefinedID})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].tag != out[j].tag {
			return out[i].tag < out[j].tag
		}
		return out[i].id < out[j].id
	})
	return out
}

// Searchable reports whether dir's ACL names uid with execute (for
// tests and diagnostics).
func Searchable(dir string, uid int) (bool, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return false, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	es, err := read(fd, uint32(fi.Mode().Perm()))
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.tag == tagUser && e.id == uint32(uid) && e.perm&permX != 0 {
			return true, nil
		}
	}
	return false, nil
}
