//go:build linux

// Command soak is the fault soak of the appliance (issue 31): `make soak` and scripts/soak.sh run
// it for DURATION, e2e/soak_test.go (TestSoakShort) for 60 seconds, with the same checks.
//
// In the lab (scripts/lab.sh) it runs mcpintercept on one terminate + Level 2 route with audit
// (arguments recorded), tool pins and tracing on (OTLP to e2e/peers/otlpsink), and sends it:
//
//   - e2e/peers/loadgen, closed loop over -conns connections, every tools/call carrying its own
//     nonce as echo's text (-nonce), a result without its nonce counted as fabricated;
//   - the Go SDK client (e2e/peers/mcpclient) and the Node SDK client (e2e/node/client.mjs), each
//     in a loop of its own: one session per call, tools listed (the pins judged) then echo called
//     with a nonce.
//
// The upstream is e2e/peers/mcpserver (stateless, -call-log: every call it executed) behind
// e2e/peers/soakorigin, the TLS front that resets or hangs on command. Faults, one window each,
// windows scaled to the duration (at 30m a window is a minute, at 60s two seconds):
//
//	reset      the upstream resets every connection mid-response
//	hang       the upstream accepts and never answers
//	disk-full  the audit directory's file system (a tmpfs of its own) filled, then freed
//	sighup     the configuration rewritten and SIGHUP sent every 2 s (a reload each)
//	kill-9     the appliance SIGKILLed and started again on the same audit directory
//	otlp-down  the OTLP collector stopped, then started again
//
// At the end it prints a table and exits 1 when a check fails: every call the upstream executed
// has an authorization record (`mcpintercept audit show --json`), `mcpintercept audit verify`
// passes across the restart, no client got a success result without its own nonce, errors only
// inside fault windows (+ -grace; with -strict-windows=false printed, not checked), the service
// answered again after the last fault, every SIGHUP reload accepted, the appliance stopped
// cleanly, and the host clean (no table inet mcpintercept, ip rules as before; with -own-lab no
// lab namespace left). The appliance's RSS and open file descriptors are sampled every few
// seconds and their slope after warm-up printed per process (before and after the kill -9).
//
//	soak -bin DIR[,DIR] [-duration 30m] [-repo .] [-own-lab] [-conns 4] [-grace 3s] [-strict-windows]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	duration      time.Duration
	bins          string
	repo          string
	work          string
	ownLab        bool
	conns         int
	grace         time.Duration
	strictWindows bool
	node          string
	auditMB       int
	keep          bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the load runs; fault windows scale with it")
	flag.StringVar(&o.bins, "bin", "bin", "comma-separated directories holding mcpintercept, mcpserver, mcpclient, loadgen, otlpsink, soakorigin")
	flag.StringVar(&o.repo, "repo", ".", "the repository root (scripts/lab.sh, .lab/pki, e2e/node)")
	flag.StringVar(&o.work, "work", "", "working directory (default: a new one under /tmp, removed at the end unless -keep)")
	flag.BoolVar(&o.ownLab, "own-lab", false, "bring the lab up first and down at the end, and check that no lab namespace is left")
	flag.IntVar(&o.conns, "conns", 4, "loadgen connections")
	flag.DurationVar(&o.grace, "grace", 3*time.Second, "errors this long after a fault window still count as inside it")
	flag.BoolVar(&o.strictWindows, "strict-windows", true, "fail when a client saw an error outside every fault window (false: print only)")
	flag.StringVar(&o.node, "node", "auto", "the Node SDK client loop: on, off, or auto (on when e2e/node/node_modules exists)")
	flag.IntVar(&o.auditMB, "audit-mb", 0, "size of the audit tmpfs in MiB (0: 256, plus 64 per minute of duration)")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory")
	flag.Parse()
	if o.duration < 30*time.Second {
		fmt.Fprintln(os.Stderr, "soak: -duration must be at least 30s")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "soak: must run as root (lab namespaces, netfilter, mounts)")
		os.Exit(2)
	}
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	o.repo = repo
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := newSoak(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ok := s.run(ctx)
	s.teardown()
	if !ok {
		os.Exit(1)
	}
}

// findBin is the first of the -bin directories holding name.
func findBin(dirs, name string) (string, error) {
	for d := range strings.SplitSeq(dirs, ",") {
		p, err := filepath.Abs(filepath.Join(d, name))
		if err != nil {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in -bin %s", name, dirs)
}
