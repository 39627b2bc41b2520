package attach

// SetHostLockDir puts m's host lock in dir instead of DefaultLockDir, for
// unit tests whose fakes touch no host chain and that need no root.
func SetHostLockDir(m *Manager, dir string) { m.hostLockDir = dir }
