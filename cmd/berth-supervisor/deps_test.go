package main

import (
	"os/exec"
	"strings"
	"testing"
)

// One berth-supervisor stays resident for every running task, so what it
// links is paid thousands of times: the artifact fetcher's HTTP, TLS and
// archive code lives in berth-fetch (cmd/berth-fetch) instead. Linking it
// here made the binary 10.0 MB instead of 3.6 MB and a running
// supervisor's RSS 7.3 MB instead of 4.6 MB.
func TestFetchBinSupervisorLinksNoFetcher(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"net/http", "crypto/tls", "crypto/x509", "archive/", "compress/",
		"github.com/berth/berth/task/artifact",
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if p == strings.TrimSuffix(f, "/") || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
				t.Errorf("berth-supervisor depends on %s: it runs once per task; fetching belongs in berth-fetch (package artifact)", p)
			}
		}
	}
}
