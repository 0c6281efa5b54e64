// Command benchsteer installs exactly the steering mcpintercept's mechanism installs for a
// configuration (the same appliance.NewSteering(cfg).Install code: nftables table, ip rules and routes),
// without the appliance, so that scripts/bench.sh can put its reference proxies (HAProxy, the
// minimal Go relay) behind the very rules mcpintercept runs behind. It prints "READY" once the
// steering is in place and removes it again on SIGINT/SIGTERM.
//
//	benchsteer --config FILE [--mechanism nftables-tproxy] [--local true|false]
//
// --local overrides the file's intercept.local (the output chain for the host's own processes).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"mcpintercept/appliance"
)

func main() {
	path := flag.String("config", "", "mcpintercept configuration file")
	mech := flag.String("mechanism", "", "override the file's mechanism")
	local := flag.String("local", "", "override intercept.local (true or false)")
	flag.Parse()
	var loc *bool
	switch *local {
	case "":
	case "true", "false":
		v := *local == "true"
		loc = &v
	default:
		fmt.Fprintln(os.Stderr, "benchsteer: --local must be true or false")
		os.Exit(2)
	}
	m, err := appliance.SteeringFromFile(*path, *mech, loc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsteer:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	if err := m.Install(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "benchsteer: install:", err)
		os.Exit(1)
	}
	fmt.Println("READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if err := m.Remove(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "benchsteer: remove:", err)
		os.Exit(1)
	}
}
