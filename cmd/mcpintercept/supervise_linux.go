package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/config"
	"mcpintercept/intercept"
)

// A fatal runtime error (stack overflow, out of memory, concurrent map writes) ends a Go process
// without running a deferred function or a recover: `run` and `exec` would die with their
// steering installed and the host's traffic sent to a listener that is gone. So `run` and `exec`
// started from a terminal re-execute themselves: this process becomes a small supervisor that
// holds no steering state, forwards signals, and, when the data plane (its child) dies without
// its orderly exit, removes what that mechanism installs, as `mcpintercept cleanup` does, then
// exits with the child's status.
//
// Not supervised: under systemd (NOTIFY_SOCKET set: the unit's ExecStopPost runs `cleanup`, and
// NotifyAccess=main wants the main process to be the one that notifies), and when
// MCPINTERCEPT_SUPERVISOR=off (debugging: one process, as before).
const (
	envSupervisorFD = "MCPINTERCEPT_SUPERVISOR_FD" // set in the data plane: the pipe's descriptor
	envSupervisor   = "MCPINTERCEPT_SUPERVISOR"    // "off" opts out
)

// supervisedCommands are the subcommands that install steering and run until stopped.
var supervisedCommands = map[string]bool{"run": true, "exec": true}

// wantSupervisor says whether this invocation should run as the supervisor of a data plane.
func wantSupervisor(args []string, getenv func(string) string) bool {
	if len(args) == 0 || !supervisedCommands[args[0]] {
		return false
	}
	if getenv(envSupervisorFD) != "" || getenv("NOTIFY_SOCKET") != "" {
		return false
	}
	return getenv(envSupervisor) != "off"
}

// superviseIfWanted runs the data plane as a child and supervises it when this invocation wants
// it (wantSupervisor); ok is false when this process is to be the data plane itself.
func superviseIfWanted(args []string, stderr io.Writer) (code int, ok bool) {
	if !wantSupervisor(args, os.Getenv) {
		return 0, false
	}
	log := appliance.NewLogger("info", stderr).With("component", "supervisor")
	code, err := supervise(args, log)
	if err != nil {
		// The data plane never started: nothing was installed. Run it in this process instead,
		// unsupervised, rather than refuse to work.
		log.Warn("cannot start the supervised data plane; running unsupervised", "err", err)
		return 0, false
	}
	return code, true
}

// forwarded are the signals the supervisor passes to the data plane, per subcommand: what the
// data plane itself handles. exec ignores SIGINT and SIGQUIT (the terminal sends them to the
// command directly, which shares the process group), so its supervisor ignores them too.
func forwarded(cmd string) (pass, ignore []os.Signal) {
	if cmd == "exec" {
		return []os.Signal{syscall.SIGTERM, syscall.SIGHUP}, []os.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGPIPE}
	}
	// SIGQUIT too: unhandled it would kill the supervisor (and, by Pdeathsig, the data plane)
	// with the steering left; forwarded, the data plane dumps its goroutines and the supervisor
	// cleans up after it.
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGQUIT}, []os.Signal{syscall.SIGPIPE}
}

// supervise starts the data plane (this binary, same arguments, same stdio) and waits for it. An
// error means it could not be started.
func supervise(args []string, log *slog.Logger) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find own executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("report pipe: %w", err)
	}
	defer r.Close()
	child := exec.Command(exe, args...)
	child.Args[0] = os.Args[0] // ps shows the same command line twice, not /proc/self/exe
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.ExtraFiles = []*os.File{w} // descriptor 3
	child.Env = append(os.Environ(), envSupervisorFD+"=3")
	// If the supervisor is killed (SIGKILL, which nothing can catch), the data plane dies with it,
	// as the single process did: it never serves unsupervised. The signal is tied to the thread
	// that forked, so this goroutine keeps its thread for the rest of the process.
	runtime.LockOSThread()
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	pass, ignore := forwarded(args[0])
	signal.Ignore(ignore...)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, pass...) // before Start: no signal falls between
	defer signal.Stop(sigs)

	if err := child.Start(); err != nil {
		w.Close()
		signal.Reset(ignore...)
		return 0, fmt.Errorf("start data plane: %w", err)
	}
	w.Close()
	reports := make(chan childReport, 1)
	go func() { reports <- parseReport(r) }()

	waited := make(chan error, 1)
	go func() { waited <- child.Wait() }()
	for running := true; running; {
		select {
		case s := <-sigs:
			child.Process.Signal(s)
		case <-waited:
			running = false
		}
	}
	rep := awaitReport(r, reports)
	if !rep.Exited {
		removeAfter(child, rep.Mechanism, log)
	}
	return statusOf(child.ProcessState), nil
}

// awaitReport returns what the data plane wrote. Its end of the pipe closed when it died; the
// deadline only guards against a descendant that somehow inherited it.
func awaitReport(r *os.File, reports <-chan childReport) childReport {
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	return <-reports
}

// removeAfter removes the steering of a data plane that died without its orderly exit.
func removeAfter(child *exec.Cmd, mech config.Mechanism, log *slog.Logger) {
	args := []any{"pid", child.Process.Pid, "status", child.ProcessState.String()}
	if mech == "" {
		log.Error("data plane died before installing steering; nothing to remove", args...)
		return
	}
	log.Error("data plane died without its orderly stop; removing its steering", append(args, "mechanism", mech)...)
	removed, err := cleanupFor(context.Background(), mech)
	for _, what := range removed {
		log.Info("removed " + what)
	}
	if err != nil {
		log.Error("remove steering; run `mcpintercept cleanup`", "err", err)
		return
	}
	log.Info("steering removed", "mechanism", mech, "objects", len(removed))
}

// cleanupFor is `mcpintercept cleanup` narrowed to what mechanism m installs, so that a dead
// data plane's cleanup never takes another instance's steering with it:
//   - external installs nothing;
//   - ebpf (and every exec) is intercept.CleanupEBPF, which leaves alone what a live process
//     holds (links, cgroups named after a running creator): concurrent exec runs keep theirs;
//   - nftables-tproxy, iptables-redirect and dns install fixed-name tables, chains and a
//     protocol-tagged routing table, of which a network namespace holds one set: the whole
//     intercept.Cleanup, exactly `mcpintercept cleanup`. An unknown name gets the same (leaving
//     steering behind is the worse mistake).
func cleanupFor(ctx context.Context, m config.Mechanism) ([]string, error) {
	switch m {
	case config.External:
		return nil, nil
	case config.EBPF:
		return intercept.CleanupEBPF()
	}
	return intercept.Cleanup(ctx)
}

// statusOf is the exit code the supervisor passes on: the child's, or 128+signal (the shell's
// convention) when a signal killed it.
func statusOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return exitRuntime
}

// newInheritedFile is the data plane's end of the report pipe, made close-on-exec.
func newInheritedFile(fd int) *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "supervisor")
}
