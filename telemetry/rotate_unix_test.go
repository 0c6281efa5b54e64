//go:build unix

package telemetry

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRotateNeverRenamesSpecialFiles: a flow log pointed at a device or a FIFO (`log.flows:
// /dev/null` is common in benchmarks) is never rotated — renaming /dev/null once replaced the
// host's null device with a plain file. A FIFO stands in for the device so that a regression
// cannot damage the machine running the test.
func TestRotateNeverRenamesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "flows.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		f, err := os.Open(fifo)
		if err != nil {
			return
		}
		io.Copy(io.Discard, f)
		f.Close()
	}()
	r, err := OpenRotatingFile(fifo, 1024, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 200) + "\n")
	for i := 0; i < 50; i++ { // 10 KiB through a 1 KiB limit
		if _, err := r.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	<-drained
	st, err := os.Lstat(fifo)
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("%s is no longer a FIFO: %v %v", fifo, st.Mode(), err)
	}
	if _, err := os.Lstat(fifo + ".1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a special file was rotated: %s.1 exists", fifo)
	}
}
