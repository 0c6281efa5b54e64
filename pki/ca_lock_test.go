//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pki

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func fingerprint(ca *CA) string {
	sum := sha256.Sum256(ca.Cert.Raw)
	return hex.EncodeToString(sum[:])
}

// loadConsistent loads dir (Load checks that the key matches the certificate) and returns its
// fingerprint.
func loadConsistent(t *testing.T, dir string) string {
	t.Helper()
	ca, err := Load(dir)
	if err != nil {
		t.Fatalf("Load after concurrent creation: %v", err)
	}
	return fingerprint(ca)
}

type result struct {
	fp      string
	created bool
	err     error
}

func (r result) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("created=%t %.12s", r.created, r.fp)
}

// concurrently runs op n times at once, each in its own goroutine, released together.
func concurrently(n int, op func() result) []result {
	var wg sync.WaitGroup
	start := make(chan struct{})
	res := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i] = op()
		}()
	}
	close(start)
	wg.Wait()
	return res
}

// checkOneCreator asserts that exactly one caller created the CA, every other caller loaded
// (LoadOrInit) or was told it exists (Init), and the directory holds the creator's CA.
func checkOneCreator(t *testing.T, dir string, res []result, othersFail bool) {
	t.Helper()
	created := 0
	var winner string
	for _, r := range res {
		if r.created {
			created++
			winner = r.fp
		}
	}
	if created != 1 {
		t.Fatalf("%d callers created a CA, want exactly 1: %v", created, res)
	}
	for i, r := range res {
		switch {
		case r.created:
		case othersFail:
			if r.err == nil || !strings.Contains(r.err.Error(), "already exists") {
				t.Errorf("caller %d: err %v, want already exists", i, r.err)
			}
		case r.err != nil:
			t.Errorf("caller %d: %v", i, r.err)
		case r.fp != winner:
			t.Errorf("caller %d got CA %s, the creator made %s", i, r.fp[:12], winner[:12])
		}
	}
	if got := loadConsistent(t, dir); got != winner {
		t.Errorf("directory holds CA %s, the creator made %s", got[:12], winner[:12])
	}
}

func loadOrInitOp(dir string) func() result {
	return func() result {
		ca, created, err := LoadOrInit(dir)
		if err != nil {
			return result{err: err}
		}
		return result{fp: fingerprint(ca), created: created}
	}
}

func initOp(dir string, force bool) func() result {
	return func() result {
		ca, err := Init(dir, force)
		if err != nil {
			return result{err: err}
		}
		return result{fp: fingerprint(ca), created: true}
	}
}

// Issue 8 case 12: concurrent creations must leave one consistent CA that every caller agrees on.
func TestConcurrentCreationGoroutines(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprintf("LoadOrInit/%d", round), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			checkOneCreator(t, dir, concurrently(8, loadOrInitOp(dir)), false)
		})
		t.Run(fmt.Sprintf("Init/%d", round), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			checkOneCreator(t, dir, concurrently(8, initOp(dir, false)), true)
		})
		t.Run(fmt.Sprintf("Init --force/%d", round), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			res := concurrently(8, initOp(dir, true))
			made := map[string]bool{}
			for _, r := range res {
				if r.err != nil {
					t.Fatalf("Init --force: %v", r.err)
				}
				made[r.fp] = true
			}
			if got := loadConsistent(t, dir); !made[got] {
				t.Errorf("directory holds CA %s, which no caller made", got[:12])
			}
		})
	}
}

const (
	helperDirEnv = "PKI_TEST_HELPER_DIR"
	helperOpEnv  = "PKI_TEST_HELPER_OP"
)

// TestHelperProcess is not a test: the tests below re-execute the test binary to run it as a
// separate process, which creates a CA in $PKI_TEST_HELPER_DIR once stdin closes.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process for the multi-process tests")
	}
	io.Copy(io.Discard, os.Stdin) // the start barrier
	op := os.Getenv(helperOpEnv)
	if stage, ok := strings.CutPrefix(op, "crash-at:"); ok {
		testHookCommit = func(s string) {
			if s == stage {
				os.Exit(3) // a crash: no deferred cleanup, no unlock but the kernel's
			}
		}
		op = "init-force"
	}
	var r result
	switch op {
	case "loadorinit":
		r = loadOrInitOp(dir)()
	case "init":
		r = initOp(dir, false)()
	case "init-force":
		r = initOp(dir, true)()
	default:
		r.err = fmt.Errorf("unknown op %q", op)
	}
	if r.err != nil {
		fmt.Printf("RESULT err %s\n", r.err)
	} else {
		fmt.Printf("RESULT ok %t %s\n", r.created, r.fp)
	}
	os.Exit(0)
}

// inProcesses runs the helper n times at once as separate processes.
func inProcesses(t *testing.T, n int, dir, op string) []result {
	t.Helper()
	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bytes.Buffer
	}
	procs := make([]proc, n)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperOpEnv+"="+op)
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = proc{cmd, stdin, out}
	}
	for _, p := range procs {
		p.stdin.Close() // all started: release them together
	}
	res := make([]result, n)
	for i, p := range procs {
		err := p.cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 3 {
			res[i].err = errCrashed
			continue
		}
		if err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, p.out)
		}
		res[i] = parseResult(t, p.out.String())
	}
	return res
}

var errCrashed = errors.New("helper crashed as asked")

func parseResult(t *testing.T, out string) result {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "RESULT ")
		if !ok {
			continue
		}
		if msg, ok := strings.CutPrefix(line, "err "); ok {
			return result{err: errors.New(msg)}
		}
		var r result
		if _, err := fmt.Sscanf(line, "ok %t %s", &r.created, &r.fp); err != nil {
			t.Fatalf("bad helper line %q: %v", line, err)
		}
		return r
	}
	t.Fatalf("helper printed no result:\n%s", out)
	return result{}
}

func TestConcurrentCreationProcesses(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprintf("LoadOrInit/%d", round), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			checkOneCreator(t, dir, inProcesses(t, 4, dir, "loadorinit"), false)
		})
		t.Run(fmt.Sprintf("Init/%d", round), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			checkOneCreator(t, dir, inProcesses(t, 4, dir, "init"), true)
		})
		t.Run(fmt.Sprintf("Init --force/%d", round), func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Init(dir, false); err != nil {
				t.Fatal(err)
			}
			made := map[string]bool{}
			for _, r := range inProcesses(t, 4, dir, "init-force") {
				if r.err != nil {
					t.Fatalf("Init --force: %v", r.err)
				}
				made[r.fp] = true
			}
			if got := loadConsistent(t, dir); !made[got] {
				t.Errorf("directory holds CA %s, which no caller made", got[:12])
			}
		})
	}
}

// A process killed at any step of `ca init --force` leaves the old pair or the new pair, never a
// key of one and the certificate of the other, and no staged key lying around.
func TestCrashDuringInit(t *testing.T) {
	for _, tc := range []struct {
		stage   string
		wantNew bool
	}{
		{"key staged", false},
		{"staged", true},
		{"key committed", true}, // the new key is in place, the old certificate still is too
	} {
		t.Run(tc.stage, func(t *testing.T) {
			dir := t.TempDir()
			old, err := Init(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			res := inProcesses(t, 1, dir, "crash-at:"+tc.stage)
			if res[0].err != errCrashed {
				t.Fatalf("helper did not crash: %v", res[0])
			}
			ca, created, err := LoadOrInit(dir)
			if err != nil {
				t.Fatalf("LoadOrInit after the crash: %v", err)
			}
			if created {
				t.Error("LoadOrInit created a CA; the old or the staged one should have been kept")
			}
			if isNew := fingerprint(ca) != fingerprint(old); isNew != tc.wantNew {
				t.Errorf("after the crash the CA is new=%v, want new=%v", isNew, tc.wantNew)
			}
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if n := e.Name(); n != LockFile && n != CertFile && n != KeyFile {
					t.Errorf("%s left behind", n)
				}
			}
		})
	}
	// Load alone (as `ca export` does) finishes an interrupted commit too.
	dir := t.TempDir()
	if _, err := Init(dir, false); err != nil {
		t.Fatal(err)
	}
	inProcesses(t, 1, dir, "crash-at:key committed")
	loadConsistent(t, dir)
}
