package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/appliance"
)

// TestUnitCleansUpAfterAnyStop: under systemd no watchdog runs (appliance.WantWatchdog sees NOTIFY_SOCKET),
// so the packaged unit itself must remove the steering whatever ended the daemon, a fatal runtime
// error or SIGKILL included: ExecStopPost runs after every stop, clean or not, with full
// privileges ("+"). Readiness (Type=notify, NotifyAccess=main) comes from the daemon itself.
func TestUnitCleansUpAfterAnyStop(t *testing.T) {
	unit := readUnit(t, filepath.Join("..", "..", "packaging", "systemd", "mcpintercept.service"))
	want := map[string]string{
		"Type":         "notify",
		"NotifyAccess": "main",
		"ExecStopPost": "+/usr/bin/mcpintercept cleanup",
	}
	for k, v := range want {
		if got := unit[k]; len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %q, want exactly %q", k, got, v)
		}
	}
	if got := unit["ExecStart"]; len(got) != 1 || !strings.HasPrefix(got[0], "/usr/bin/mcpintercept run ") {
		t.Errorf("ExecStart = %q, want `mcpintercept run`", got)
	}
	if appliance.WantWatchdog("run", func(k string) string { return map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify"}[k] }) {
		t.Error("run under systemd starts a watchdog: the sandboxed service cannot clean up what ExecStopPost does")
	}
}

// readUnit returns the [Service] assignments of a systemd unit file, every value of each key.
func readUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = line
		case section == "[Service]":
			if k, v, ok := strings.Cut(line, "="); ok {
				out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
			}
		}
	}
	return out
}
