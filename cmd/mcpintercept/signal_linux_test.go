package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestRunSignals: `run` (mechanism external: nothing to install, no privileges) reopens the
// flow log file on SIGUSR1, after logrotate renamed it, instead of dying of it, and still stops
// on SIGTERM.
func TestRunSignals(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	flows := filepath.Join(dir, "flows.jsonl")
	cfg := filepath.Join(dir, "run.yaml")
	src := fmt.Sprintf("mechanism: external\nlisten: {addresses: [127.0.0.1], port: %d}\n"+
		"intercept: {destinations: [10.200.2.0/24], ports: [8080]}\nadmin: {listen: \"off\"}\nlog: {flows: %s}\n", port, flows)
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout := newNotifyBuffer() // written by the flow log goroutine
	stderr := newNotifyBuffer()
	done := make(chan int, 1)
	exited := make(chan struct{})
	go func() { done <- realMain([]string{"run", "--config", cfg}, stdout, stderr); close(exited) }()
	// The deadlines are hang guards: the waits end on the line being written, or on run's exit.
	waitFor := func(what string) {
		t.Helper()
		if !stderr.waitFor(what, exited, 2*time.Minute) {
			t.Fatalf("no %q in:\n%s", what, stderr.String())
		}
	}
	waitFor("msg=ready")
	if err := os.Rename(flows, flows+".old"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	waitFor("flow log reopened")
	if _, err := os.Stat(flows); err != nil {
		t.Fatalf("the flow log was not created again: %v", err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("run exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not stop on SIGTERM")
	}
}
