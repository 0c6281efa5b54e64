package audit

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestFillerOwnDescriptor: the filler writes and syncs through a descriptor of its own, never the
// writer's. Linux reports a failed writeback once per open file description, so a filler sync
// that flushed the writer's records and met an error on the writer's descriptor would consume the
// error the writer's fdatasync must return, and records not on disk would be acknowledged. The
// filler's zeros still land in the writer's file.
func TestFillerOwnDescriptor(t *testing.T) {
	path := filepath.Join(t.TempDir(), segmentName(1))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl := startFiller(f, filepath.Base(path), 0, fillPiece, slog.New(slog.DiscardHandler))
	if fl.f == nil {
		t.Fatalf("filler has no descriptor: %v", fl.err)
	}
	if fl.f == f || fl.f.Fd() == f.Fd() {
		t.Fatalf("the filler shares the writer's descriptor %d", f.Fd())
	}
	fl.mu.Lock()
	for fl.pieces == 0 && fl.err == nil {
		fl.idle.Wait()
	}
	fl.mu.Unlock()
	fl.close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != fillPiece {
		t.Fatalf("segment is %d bytes after one piece of %d", fi.Size(), fillPiece)
	}
}
