// Command tidychains removes the CNI plugins' shared iptables chains
// (firewall's CNI-FORWARD/CNI-ADMIN, portmap's CNI-HOSTPORT-*) when
// nothing uses them, holding berth's host lock, as berth's gc does. The
// tests' leak check (testenv.LeakCheckMain) builds and runs it after a
// test binary's tests: a command rather than an import, so that testenv
// imports none of the packages whose tests use it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/network/hostclean"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tidy(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "tidychains: %v\n", err)
		os.Exit(1)
	}
}

func tidy(ctx context.Context) error {
	unlock, err := attach.LockHost(ctx, "", true)
	if err != nil {
		return err
	}
	defer unlock()
	_, err = hostclean.TidySharedChains(ctx, hostclean.Plan{})
	return err
}
