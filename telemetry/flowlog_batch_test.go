package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// safeBuffer is a bytes.Buffer the writer goroutine and the test may share.
type safeBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gateWriter holds its first write until released, so that the records logged meanwhile are
// known to wait together; it keeps every write. fail, when set, makes the writes after the first
// write only part of what they are given and fail.
type gateWriter struct {
	entered, release chan struct{}
	fail             func(p []byte) int
	mu               sync.Mutex
	writes           []string
}

func newGateWriter() *gateWriter {
	return &gateWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *gateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	first := len(w.writes) == 0
	w.writes = append(w.writes, string(p))
	w.mu.Unlock()
	if first {
		close(w.entered)
		<-w.release
		return len(p), nil
	}
	if w.fail != nil {
		return w.fail(p), errors.New("disk full")
	}
	return len(p), nil
}

// TestFlowLogBatches: the records that queue while a write is under way leave together, in one
// write of whole lines, in the order they were logged.
func TestFlowLogBatches(t *testing.T) {
	w := newGateWriter()
	fl := NewFlowLog(w, 64, quietLog(), nil)
	fl.Write(FlowRecord{Flow: "a"})
	<-w.entered
	for i := range 5 {
		fl.Write(FlowRecord{Flow: fmt.Sprintf("b%d", i)})
	}
	close(w.release)
	fl.Close()
	if len(w.writes) != 2 {
		t.Fatalf("%d writes, want 2 (the first record, then the five that waited): %q", len(w.writes), w.writes)
	}
	var flows []string
	for _, line := range strings.SplitAfter(strings.TrimSuffix(w.writes[1], "\n"), "\n") {
		flows = append(flows, flowOf(t, line))
	}
	if want := []string{"b0", "b1", "b2", "b3", "b4"}; !slices.Equal(flows, want) {
		t.Fatalf("second write %q, want the records %q", flows, want)
	}
}

// TestFlowLogBatchFailureDrops: when a write of a batch fails part way, the lines it did not
// write whole are counted as dropped, and only those.
func TestFlowLogBatchFailureDrops(t *testing.T) {
	w := newGateWriter()
	// One whole line and half of the next reach the file.
	w.fail = func(p []byte) int { i := bytes.IndexByte(p, '\n'); return i + 1 + (bytes.IndexByte(p[i+1:], '\n'))/2 }
	m := NewMetrics()
	fl := NewFlowLog(w, 64, quietLog(), m.LogDropped.Inc)
	fl.Write(FlowRecord{Flow: "a"})
	<-w.entered
	for i := range 4 {
		fl.Write(FlowRecord{Flow: fmt.Sprintf("b%d", i)})
	}
	close(w.release)
	fl.Close()
	if d := testutil.ToFloat64(m.LogDropped); d != 3 {
		t.Fatalf("%v dropped, want 3 (of a batch of 4, one line was written whole)", d)
	}
}

// TestFlowLogQueueBound: the queue bounds the records held, waiting or in the batch being
// written, however they are batched: past it, records are dropped and counted, and a record
// written after Close is dropped too.
func TestFlowLogQueueBound(t *testing.T) {
	w := newGateWriter()
	m := NewMetrics()
	fl := NewFlowLog(w, 3, quietLog(), m.LogDropped.Inc)
	fl.Write(FlowRecord{Flow: "a"})
	<-w.entered // "a" is being written: it holds one of the three places
	for i := range 5 {
		fl.Write(FlowRecord{Flow: fmt.Sprintf("b%d", i)})
	}
	if d := testutil.ToFloat64(m.LogDropped); d != 3 {
		t.Fatalf("%v dropped with 5 records behind one in a queue of 3, want 3", d)
	}
	close(w.release)
	fl.Close()
	fl.Write(FlowRecord{Flow: "late"})
	if d := testutil.ToFloat64(m.LogDropped); d != 4 {
		t.Fatalf("%v dropped after a write past Close, want 4", d)
	}
	if got := strings.Count(strings.Join(w.writes, ""), "\n"); got != 3 {
		t.Fatalf("%d lines written, want 3", got)
	}
}

// TestRotatingFileBatch: one Write of many lines rotates between lines as one Write per line
// did: no file over the limit, each rotated file full, a long line alone in its file, the newest
// lines kept in order.
func TestRotatingFileBatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	const maxSize, maxFiles = 4096, 20
	rf, err := OpenRotatingFile(path, maxSize, maxFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	var batch []byte
	long := fmt.Sprintf(`{"flow":"long","pad":%q}`, strings.Repeat("y", 2*maxSize))
	for i := range 400 {
		line := fmt.Sprintf(`{"flow":"f-%05d","pad":%q}`, i, strings.Repeat("x", i%150))
		if i == 200 {
			line = long
		}
		all = append(all, line)
		batch = append(batch, line+"\n"...)
	}
	half := bytes.Index(batch, []byte(`{"flow":"f-00300"`))
	for _, p := range [][]byte{batch[:half], batch[half:]} {
		if n, err := rf.Write(p); err != nil || n != len(p) {
			t.Fatalf("write of %d bytes: %d, %v", len(p), n, err)
		}
	}
	rf.Close()
	files := logFiles(t, dir)
	if len(files) < 5 || len(files) > maxFiles+1 {
		t.Fatalf("%d files", len(files))
	}
	name := func(i int) string {
		if i == 0 {
			return "flows.jsonl"
		}
		return fmt.Sprintf("flows.jsonl.%d", i)
	}
	var kept []string
	for i := len(files) - 1; i >= 0; i-- {
		lines, ok := files[name(i)]
		if !ok {
			t.Fatalf("%s missing among %d files", name(i), len(files))
		}
		st, _ := os.Stat(filepath.Join(dir, name(i)))
		switch {
		case slices.Contains(lines, long):
			if len(lines) != 1 {
				t.Errorf("%s: the long line shares its file with %d others", name(i), len(lines)-1)
			}
		case st.Size() > maxSize:
			t.Errorf("%s: %d bytes", name(i), st.Size())
		case i > 0 && st.Size() < maxSize-200 && files[name(i-1)][0] != long:
			// A rotated file is full (the next line would not have fitted), unless the next
			// line was the long one, which goes alone into a file of its own.
			t.Errorf("%s: rotated at %d bytes, long before %d", name(i), st.Size(), maxSize)
		}
		kept = append(kept, lines...)
	}
	if !slices.Equal(kept, all[len(all)-len(kept):]) {
		t.Fatal("the kept files are not the newest lines in order")
	}
}
