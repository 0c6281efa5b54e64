package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// repoFile reads a file of the source tree.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkText runs `check` (with extra flags) on src written to a temporary file, its CA directory
// moved to a temporary one (the shipped path need not exist here).
func checkText(t *testing.T, name, src string, flags ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	src = strings.ReplaceAll(src, "/var/lib/mcpintercept/ca", filepath.Join(dir, "ca"))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := realMain(append([]string{"check", "--config", p}, flags...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// uncomment drops the "# " of the commented-out route items of the shipped config ("  # - name:"
// and the "  #   key:" lines under it), as its comment tells the operator to.
var commentedRoute = regexp.MustCompile(`(?m)^  # (-|  )`)

// TestShippedConfig: the package's configuration checks as shipped, and its commented route
// uncommented the way its comment says checks too, and uses the rule set shipped with it.
func TestShippedConfig(t *testing.T) {
	src := repoFile(t, "packaging/etc/mcpintercept/mcpintercept.yaml")
	code, out, errOut := checkText(t, "mcpintercept.yaml", src)
	if code != 0 || !strings.Contains(out, "0 route(s)") {
		t.Fatalf("as shipped: exit %d\n%s%s", code, out, errOut)
	}
	un := commentedRoute.ReplaceAllString(src, "  $1")
	if un == src {
		t.Fatal("no commented route found to uncomment")
	}
	code, out, errOut = checkText(t, "mcpintercept.yaml", un, "--strict")
	if code != 0 || !strings.Contains(out, "1 route(s), 1 rule(s) compiled") {
		t.Fatalf("uncommented: exit %d\n%s%s\n%s", code, out, errOut, un)
	}
	code, out, errOut = checkText(t, "gateway.yaml", repoFile(t, "packaging/etc/mcpintercept/gateway.yaml"))
	if code != 0 {
		t.Fatalf("gateway.yaml: exit %d\n%s%s", code, out, errOut)
	}
}

// TestExampleExecConfig: examples/exec.yaml checks without a warning.
func TestExampleExecConfig(t *testing.T) {
	code, out, errOut := checkText(t, "exec.yaml", repoFile(t, "examples/exec.yaml"), "--strict")
	if code != 0 || !strings.Contains(out, "2 route(s)") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}

// TestManAndCompletion: the man page, both completions and the help texts name every command.
func TestManAndCompletion(t *testing.T) {
	man := repoFile(t, "packaging/man/mcpintercept.1")
	bash := repoFile(t, "packaging/completion/mcpintercept.bash")
	zsh := repoFile(t, "packaging/completion/_mcpintercept")
	for name := range commands {
		if !strings.Contains(man, "\n.B "+name) {
			t.Errorf("man page lacks command %s", name)
		}
		if !regexp.MustCompile(`commands="[^"]*\b` + name + `\b`).MatchString(bash) {
			t.Errorf("bash completion lacks command %s", name)
		}
		if !strings.Contains(zsh, "'"+name+":") {
			t.Errorf("zsh completion lacks command %s", name)
		}
		if commandHelp[name] == "" {
			t.Errorf("no --help text for %s", name)
		}
	}
	if out, err := exec.Command("bash", "-n", filepath.Join("..", "..", "packaging/completion/mcpintercept.bash")).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
	if _, err := exec.LookPath("zsh"); err == nil {
		if out, err := exec.Command("zsh", "-n", filepath.Join("..", "..", "packaging/completion/_mcpintercept")).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
	// Completing `ca init --` offers init's flags only.
	script := `source ../../packaging/completion/mcpintercept.bash; COMP_WORDS=(mcpintercept ca init --); COMP_CWORD=3; _mcpintercept; echo "${COMPREPLY[*]}"`
	out, err := exec.Command("bash", "-c", script).Output()
	if err != nil || strings.TrimSpace(string(out)) != "--config --dir --force --help" {
		t.Errorf("bash completion of ca init --: %q %v", out, err)
	}
}

func TestDevelVersion(t *testing.T) {
	info := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0322d4d1234567890abcdef"}, {Key: "vcs.time", Value: "2026-12-02T07:46:11Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got := develVersion(info, true); got != "devel 0322d4d12345+dirty (2026-12-02T07:46:11Z)" {
		t.Errorf("develVersion = %q", got)
	}
	if got := develVersion(nil, false); got != "devel" {
		t.Errorf("without build info: %q", got)
	}
	if got := develVersion(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true); got != "devel v1.2.3" {
		t.Errorf("module version: %q", got)
	}
}
