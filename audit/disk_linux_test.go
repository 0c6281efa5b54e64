package audit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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
	disk := smallDisk(t)
	dir := filepath.Join(disk, "audit")
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 3)
	filler := filepath.Join(disk, "filler")
	fill(t, filler)

	// The segment's last page may still have room for a few records.
	var err error
	n := 3
	for ; n < 200 && err == nil; n++ {
		_, err = s.Append(context.Background(), sample(n))
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk: %v, want ErrUnavailable wrapping ENOSPC", err)
	}
	if s.Ready() == nil {
		t.Fatal("Ready is nil on a full disk")
	}
	data, rerr := os.ReadFile(filepath.Join(dir, segmentName(1)))
	if rerr != nil {
		t.Fatal(rerr)
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
