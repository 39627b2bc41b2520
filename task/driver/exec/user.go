package exec

import (
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"

	"github.com/berth/berth/task/driver"
)

// taskUser is a task's user, resolved on this node.
type taskUser struct {
	name     string
	uid, gid int
	groups   []int
}

// ValidateUser checks that a task of this driver may run as name on this
// node: the user exists and is not denied. Empty is the driver's default.
func (d *Driver) ValidateUser(name string) error {
	if name == "" {
		if !d.isolate {
			return nil
		}
		name = DefaultExecUser
	}
	_, err := d.lookupUser(name)
	return err
}

// lookupUser resolves a user name (or a numeric UID) with its primary and
// supplementary groups, and refuses a denied one: a user named in the
// denylist, or one whose UID is a denied user's (root-like: toor, any
// alias of UID 0).
func (d *Driver) lookupUser(name string) (*taskUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
		if err != nil {
			if errors.As(err, &unknown) || errors.As(err, new(user.UnknownUserIdError)) {
				return nil, fmt.Errorf("user %q: %w on this node (it must exist in its /etc/passwd)", name, driver.ErrUnknownUser)
			}
			return nil, fmt.Errorf("user %q: %w", name, err)
		}
	}
	tu := &taskUser{name: name}
	if tu.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	if tu.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("user %q: gid %q: %w", name, u.Gid, err)
	}
	if err := d.checkDenied(name, u); err != nil {
		return nil, err
	}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("user %q: supplementary groups: %w", name, err)
	}
	for _, g := range gids {
		n, err := strconv.Atoi(g)
		if err != nil {
			continue
		}
		if !slices.Contains(tu.groups, n) {
			tu.groups = append(tu.groups, n)
		}
	}
	if !slices.Contains(tu.groups, tu.gid) {
		tu.groups = append(tu.groups, tu.gid)
	}
	return tu, nil
}

func (d *Driver) checkDenied(name string, u *user.User) error {
	for _, denied := range d.deniedUsers {
		if denied == name || denied == u.Username {
			return fmt.Errorf("user %q: %w: the %s driver does not run tasks as %s (agent setting tasks.user_denylist)", name, driver.ErrDeniedUser, d.name, denied)
		}
		if du, err := user.Lookup(denied); err == nil && du.Uid == u.Uid {
			return fmt.Errorf("user %q: %w: it has UID %s, as the denied user %s has (agent setting tasks.user_denylist)", name, driver.ErrDeniedUser, u.Uid, denied)
		}
	}
	return nil
}

// TaskCredential is who a task of this driver runs as: its user, or the
// driver's default (berth's own, root, for raw_exec; nobody for exec).
func (d *Driver) TaskCredential(name string) (driver.Credential, error) {
	if name == "" {
		if !d.isolate {
			return driver.Credential{Name: "root"}, nil
		}
		name = DefaultExecUser
	}
	u, err := d.lookupUser(name)
	if err != nil {
		return driver.Credential{}, err
	}
	return driver.Credential{Name: u.name, UID: u.uid, GID: u.gid, Groups: u.groups}, nil
}
