package podman

import "testing"

// provenBy names, for every key of podman's table, the test that sees it
// applied in a container (or, for a key refused or accepted without
// effect, the test that checks that verdict): a key added without one
// fails TestEveryKeyProven.
var provenBy = map[string]string{
	"image": "TestRunTask", "command": "TestRunTask", "args": "TestRunTask",
	"hostname": "TestRunTask", "labels": "TestRunTask",
	"entrypoint": "TestConfigKeysApplied", "working_dir": "TestConfigKeysApplied",
	"dns": "TestConfigKeysApplied", "extra_hosts": "TestConfigKeysApplied", "tmpfs": "TestConfigKeysApplied",
	"devices": "TestConfigKeysApplied", "cap_add": "TestConfigKeysApplied", "cap_drop": "TestConfigKeysApplied",
	"security_opt": "TestConfigKeysApplied", "readonly_rootfs": "TestConfigKeysApplied", "init": "TestConfigKeysApplied",
	"init_path": "TestConfigKeysApplied", "tty": "TestConfigKeysApplied", "sysctl": "TestConfigKeysApplied",
	"ulimit": "TestConfigKeysApplied", "oom_score_adj": "TestConfigKeysApplied", "shm_size": "TestConfigKeysApplied",
	"memory_reservation": "TestConfigKeysApplied", "memory_swappiness": "TestConfigKeysApplied",
	"memory_swap": "TestConfigKeysApplied", "pids_limit": "TestConfigKeysApplied", "userns": "TestConfigKeysApplied",
	"network_mode": "TestConfigKeysApplied (none), TestApplyNetworkRefusals",
	"ports":        "job/runner TestServiceWithMappedPort (reached through the mapped port), TestApplyNetworkRefusals",
	"privileged":   "TestSecPodmanPrivileged",
	// Only a privileged node may turn SELinux labels or AppArmor off; the
	// others are passed to podman as given (TestApplyConfigSpec).
	"selinux_opts": "TestRefusedKeys, TestApplyConfigSpec", "apparmor_profile": "TestRefusedKeys, TestApplyConfigSpec",
	"cpu_hard_limit": "TestRefusedKeys", "force_pull": "TestRefusedKeys", "socket": "TestRefusedKeys",
	"logging": "TestRefusedKeys", "cpu_cfs_period": "TestRefusedKeys", "ipc_mode": "TestRefusedKeys",
	"port_map": "TestRefusedKeys", "volumes": "TestRefusedKeys", "arch": "TestRefusedKeys", "os": "TestRefusedKeys",
	"variant": "TestRefusedKeys", "ipv4_address": "TestRefusedKeys", "ipv6_address": "TestRefusedKeys",
	"static_ips": "TestRefusedKeys", "static_mac": "TestRefusedKeys",
	"auth": "TestParseConfig", "auth_soft_fail": "TestParseConfig", "image_pull_timeout": "TestParseConfig",
}

func TestEveryKeyProven(t *testing.T) {
	known := map[string]bool{}
	for _, r := range ConfigKeys() {
		known[r.Name] = true
		if provenBy[r.Name] == "" {
			t.Errorf("podman key %s (%s) has no test that proves its verdict: add one and name it in provenBy", r.Name, r.Verdict)
		}
	}
	for k := range provenBy {
		if !known[k] {
			t.Errorf("provenBy names %s, which is not a podman key", k)
		}
	}
}
