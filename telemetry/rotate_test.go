package telemetry

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// logFiles reads every file in dir: name → its lines (without the newline). Each line must be
// one whole JSON object.
func logFiles(t *testing.T, dir string) map[string][]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s does not end with a newline: a line was split", e.Name())
		}
		var lines []string
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if !json.Valid(sc.Bytes()) {
				t.Fatalf("%s: line %d is not valid JSON: %q", e.Name(), len(lines)+1, sc.Text())
			}
			lines = append(lines, sc.Text())
		}
		out[e.Name()] = lines
	}
	return out
}

func flowOf(t *testing.T, line string) string {
	t.Helper()
	var r FlowRecord
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return r.Flow
}

// TestFlowLogRotatesUnderLoad: many goroutines log while the file rotates by size and is renamed
// away and reopened (logrotate + SIGUSR1) at the same time. Every record lands exactly once, each
// line is whole JSON, each writer's records keep their order within a file, no file passes the
// size limit, and nothing is dropped (the queue holds the burst).
func TestFlowLogRotatesUnderLoad(t *testing.T) {
	const (
		writers = 16
		each    = 1500
		maxSize = 128 << 10
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	rf, err := OpenRotatingFile(path, maxSize, 1000, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	// A queue that can hold the whole burst is never overloaded, so a lost record could only be
	// the rotation's (the appliance's 8192 holds it too at this rate, but a slow CI host need not).
	fl := NewFlowLog(rf, writers*each, quietLog(), m.LogDropped.Inc)

	// logrotate: rename the live file away (dateext style, which the size rotation's .N names
	// never collide with), then ask for a reopen, as the package's postrotate does.
	stop := make(chan struct{})
	rotated := make(chan int)
	go func() {
		n := 0
		defer func() { rotated <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			err := os.Rename(path, fmt.Sprintf("%s-%04d", path, n))
			if errors.Is(err, os.ErrNotExist) {
				continue // between the size rotation's rename and its open
			}
			if err != nil {
				t.Error(err)
				return
			}
			if err := fl.Reopen(); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()

	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				fl.Write(FlowRecord{Time: Time{time.Now()}, Flow: fmt.Sprintf("g%02d-%05d", g, i),
					Client: "10.200.1.2:53124", OrigDst: "10.200.2.2:8080", Mechanism: "nftables-tproxy",
					TLS: "terminated", Level: 2, HTTPMethod: "POST", Path: "/mcp", Status: 200,
					MCPMethod: "tools/call", MCPName: "echo", Decision: "allow", Reason: "a <reason> & \u2028"})
				if i%10 == 0 {
					time.Sleep(time.Millisecond) // a steady load, spread over the renames
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	renames := <-rotated
	fl.Close()
	rf.Close()

	if d := testutil.ToFloat64(m.LogDropped); d != 0 {
		t.Fatalf("%v records dropped", d)
	}
	files := logFiles(t, dir)
	seen := map[string]int{}
	sizeRotated, reopened := 0, 0
	for name, lines := range files {
		switch {
		case strings.HasPrefix(name, "flows.jsonl."):
			sizeRotated++
		case strings.HasPrefix(name, "flows.jsonl-"):
			reopened++
		}
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxSize {
			t.Errorf("%s is %d bytes, over the %d limit", name, st.Size(), maxSize)
		}
		last := map[string]int{}
		for _, l := range lines {
			f := flowOf(t, l)
			seen[f]++
			g, i, _ := strings.Cut(f, "-")
			n, _ := strconv.Atoi(i)
			if p, ok := last[g]; ok && n <= p {
				t.Fatalf("%s: %s after %s-%05d: out of order", name, f, g, p)
			}
			last[g] = n
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("%d distinct records in the files, want %d", len(seen), writers*each)
	}
	for f, n := range seen {
		if n != 1 {
			t.Fatalf("record %s appears %d times", f, n)
		}
	}
	if sizeRotated < 2 || reopened < 2 {
		t.Fatalf("the test did not exercise rotation: %d size-rotated files, %d reopened ones (%d renames)",
			sizeRotated, reopened, renames)
	}
	t.Logf("%d records in %d files: %d rotated by size, %d renamed away and reopened", len(seen), len(files), sizeRotated, reopened)
}

// TestRotatingFileBounded: the size rotation keeps the live file and max files rotated ones,
// none over the limit, and together they hold the newest lines, in order.
func TestRotatingFileBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	const maxSize, maxFiles = 4096, 3
	rf, err := OpenRotatingFile(path, maxSize, maxFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for i := range 2000 {
		line := fmt.Sprintf(`{"flow":"f-%05d","pad":%q}`, i, strings.Repeat("x", i%150))
		all = append(all, line)
		if _, err := rf.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	rf.Close()
	files := logFiles(t, dir)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"flows.jsonl", "flows.jsonl.1", "flows.jsonl.2", "flows.jsonl.3"}; !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	var kept []string
	for _, n := range []string{"flows.jsonl.3", "flows.jsonl.2", "flows.jsonl.1", "flows.jsonl"} {
		st, _ := os.Stat(filepath.Join(dir, n))
		if st.Size() > maxSize {
			t.Errorf("%s: %d bytes", n, st.Size())
		}
		// A rotated file is full: the next line would not have fitted.
		if n != "flows.jsonl" && st.Size() < maxSize-200 {
			t.Errorf("%s: rotated at %d bytes, long before %d", n, st.Size(), maxSize)
		}
		kept = append(kept, files[n]...)
	}
	if !slices.Equal(kept, all[len(all)-len(kept):]) {
		t.Fatal("the kept files are not the newest lines in order")
	}
}

// TestRotatingFileLongLine: a line longer than the limit is written whole, alone in its file.
func TestRotatingFileLongLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	rf, err := OpenRotatingFile(path, 100, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := `{"flow":"` + strings.Repeat("y", 300) + `"}` + "\n"
	for _, s := range []string{`{"flow":"a"}` + "\n", long, `{"flow":"b"}` + "\n"} {
		if _, err := rf.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	rf.Close()
	files := logFiles(t, dir)
	if got := files["flows.jsonl.2"]; len(got) != 1 || got[0] != `{"flow":"a"}` {
		t.Fatalf(".2: %q", got)
	}
	if got := files["flows.jsonl.1"]; len(got) != 1 || got[0]+"\n" != long {
		t.Fatalf(".1: %q", got)
	}
	if got := files["flows.jsonl"]; len(got) != 1 || got[0] != `{"flow":"b"}` {
		t.Fatalf("live: %q", got)
	}
}

// TestRotatingFileAppends: an existing file is appended to and its size counts toward the limit.
func TestRotatingFileAppends(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	if err := os.WriteFile(path, []byte(`{"flow":"old"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rf, err := OpenRotatingFile(path, 20, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	rf.Write([]byte(`{"flow":"new"}` + "\n"))
	rf.Close()
	files := logFiles(t, dir)
	if !slices.Equal(files["flows.jsonl.1"], []string{`{"flow":"old"}`}) || !slices.Equal(files["flows.jsonl"], []string{`{"flow":"new"}`}) {
		t.Fatalf("files %q", files)
	}
	// No size limit: no rotation at all.
	rf, err = OpenRotatingFile(path, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		rf.Write([]byte(`{"flow":"more"}` + "\n"))
	}
	rf.Close()
	if files := logFiles(t, dir); len(files["flows.jsonl"]) != 101 || len(files) != 2 {
		t.Fatalf("without a size limit: %d files, %d live lines", len(files), len(files["flows.jsonl"]))
	}
	if _, err := OpenRotatingFile(path, 10, 0, nil); err == nil {
		t.Fatal("a size limit without rotated files was accepted")
	}
}

// TestFlowLogReopen: after logrotate renamed the file, Reopen sends the next records to a new
// one; a reopen that fails (the directory is gone) drops and counts records until a later reopen
// works; Reopen on stdout is a no-op, and on a closed log an error, never a hang.
func TestFlowLogReopen(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	os.Mkdir(logDir, 0o700)
	path := filepath.Join(logDir, "flows.jsonl")
	rf, err := OpenRotatingFile(path, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	fl := NewFlowLog(rf, 16, quietLog(), m.LogDropped.Inc)
	fl.Write(FlowRecord{Flow: "before"})
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	fl.Write(FlowRecord{Flow: "renamed"}) // still the old file, as with any logrotate
	if err := fl.Reopen(); err != nil {
		t.Fatal(err)
	}
	fl.Write(FlowRecord{Flow: "after"})

	// The directory goes away: the reopen fails, records are dropped and counted.
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(logDir, moved); err != nil {
		t.Fatal(err)
	}
	if err := fl.Reopen(); err == nil {
		t.Fatal("reopen into a missing directory succeeded")
	}
	fl.Write(FlowRecord{Flow: "lost"})
	if err := os.Mkdir(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := fl.Reopen(); err != nil {
		t.Fatal(err)
	}
	fl.Write(FlowRecord{Flow: "back"})
	fl.Close()
	rf.Close()

	if d := testutil.ToFloat64(m.LogDropped); d != 1 {
		t.Fatalf("%v dropped, want 1 (the record written while the file was gone)", d)
	}
	flows := func(lines []string) (out []string) {
		for _, l := range lines {
			out = append(out, flowOf(t, l))
		}
		return out
	}
	old, cur := logFiles(t, moved), logFiles(t, logDir)
	if got := flows(old["flows.jsonl.1"]); !slices.Equal(got, []string{"before", "renamed"}) {
		t.Fatalf("renamed file: %q", got)
	}
	if got := flows(old["flows.jsonl"]); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("reopened file: %q", got)
	}
	if got := flows(cur["flows.jsonl"]); !slices.Equal(got, []string{"back"}) {
		t.Fatalf("file after the directory came back: %q", got)
	}

	if err := fl.Reopen(); !errors.Is(err, ErrFlowLogClosed) {
		t.Fatalf("Reopen after Close: %v", err)
	}
	stdout := NewFlowLog(io.Discard, 4, quietLog(), nil)
	defer stdout.Close()
	if err := stdout.Reopen(); err != nil {
		t.Fatalf("Reopen of a writer that is not a file: %v", err)
	}
}
