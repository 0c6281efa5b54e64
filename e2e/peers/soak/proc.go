//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is a process of the soak, in a lab namespace (ns) or the soak's own, its stdout and
// stderr in one log file.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	in   io.WriteCloser // stdin, when asked for
	done chan struct{}
	err  error
}

// startProc starts argv in namespace ns ("" for none), output to logPath.
func startProc(name, logPath, ns string, withStdin bool, env []string, argv ...string) (*proc, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// If the soak dies, what it started dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	if withStdin {
		if p.in, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// tail is the end of the log, for an error message.
func (p *proc) tail() string {
	s := p.output()
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return s
}

// count is how many times substr is in the log.
func (p *proc) count(substr string) int { return strings.Count(p.output(), substr) }

// waitCount waits until substr is in the log n times, the process exits, or timeout passes.
func (p *proc) waitCount(ctx context.Context, substr string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.count(substr) >= n {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited (%v) before %q:\n%s", p.name, p.err, substr, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %q within %v:\n%s", p.name, substr, timeout, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends sig and waits up to timeout for the exit, then kills.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	if p.exited() {
		return p.err
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not exit within %v of %v", p.name, timeout, sig)
	}
}

func (p *proc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// runIn runs argv to completion in namespace ns ("" for none): stdout, stderr, error.
func runIn(ctx context.Context, timeout time.Duration, ns string, env []string, dir string, argv ...string) (string, string, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}
