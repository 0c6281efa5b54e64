package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a 256 KiB tmpfs for the test; it needs root.
func smallDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}

func TestFullDiskFailsClosedAndRecovers(t *testing.T) {
	t.Run("the filler keeps its reserve free", func(t *testing.T) { fullDisk(t, false) })
	t.Run("the padding took the last space", func(t *testing.T) {
		defer func(r int64) { fillReserve = r }(fillReserve)
		fillReserve = 0
		fullDisk(t, true)
	})
}

// fullDisk fills the disk under a running store; padded says the store's
// padding took what space there was, so records go on after the disk is
// full, until the padding is used up.
func fullDisk(t *testing.T, padded bool) {
	disk := smallDisk(t)
	dir := filepath.Join(disk, "audit")
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 3)
	if padded {
		waitFilled(t, s, fillPiece) // half of the disk's 256 KiB
	} else {
		// The filler has tried and kept its reserve free.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			s.w.fill.mu.Lock()
			failed := s.w.fill.err != nil
			s.w.fill.mu.Unlock()
			if failed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the filler never ran on a disk smaller than its reserve")
			}
		}
	}
	filler := filepath.Join(disk, "filler")
	fill(t, filler)

	// The segment's zero-filled padding (its blocks are allocated) still
	// takes records; the filler has run into the full disk by now.
	var err error
	n := 3
	for ; n < 5000 && err == nil; n++ {
		_, err = s.Append(context.Background(), sample(n))
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk: %v, want ErrUnavailable wrapping ENOSPC", err)
	}
	if padded && n-1 < 3+100 {
		t.Fatalf("only %d records went into the padding after the disk filled", n-1-3)
	}
	if s.Ready() == nil {
		t.Fatal("Ready is nil on a full disk")
	}
	if !strings.Contains(err.Error(), "zero-filled") {
		t.Errorf("the error does not say the segment could not be zero-filled ahead: %v", err)
	}
	data, rerr := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		if bytes.Count(data[i:], []byte{0}) != len(data)-i {
			t.Fatalf("bytes other than NUL in the padding after a failed write")
		}
		data = data[:i]
	}
	if want := n - 1; bytes.Count(data, []byte("\n")) != want || !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatalf("segment holds %d lines (ends in newline: %v), want exactly the %d acknowledged",
			bytes.Count(data, []byte("\n")), bytes.HasSuffix(data, []byte("\n")), want)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The background probe alone makes the store ready again.
	for deadline := time.Now().Add(time.Minute); s.Ready() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("Ready still %v a minute after space was freed", s.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	appendN(t, s, n, 3)
	closeStore(t, s)
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.Records != uint64(n-1+3) {
		t.Fatalf("verified %d records, want %d", rep.Records, n-1+3)
	}
}
