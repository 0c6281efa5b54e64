package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseExtensions(t *testing.T) {
	anchor := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, sha256.Size))
	zero := base64.StdEncoding.EncodeToString(make([]byte, sha256.Size))
	tests := []struct {
		name  string
		size  uint64
		ext   string
		start uint64 // 0: no start line
		err   string
	}{
		{name: "old format", size: 5, ext: "time 2026-01-02T03:04:05.006Z\n"},
		{name: "no extension", size: 5},
		{name: "genesis", size: 5, ext: "start 1 " + zero + "\ntime 2026-01-02T03:04:05.006Z\n", start: 1},
		{name: "after retention", size: 5, ext: "start 4 " + anchor + "\n", start: 4},
		{name: "unknown line skipped", size: 5, ext: "future thing\nstart 4 " + anchor + "\n", start: 4},
		{name: "two start lines", size: 5, ext: "start 4 " + anchor + "\nstart 4 " + anchor + "\n", err: "two start"},
		{name: "two time lines", size: 5, ext: "time 2026-01-02T03:04:05.006Z\ntime 2026-01-02T03:04:05.006Z\n", err: "two time"},
		{name: "start after the head", size: 5, ext: "start 7 " + anchor + "\n", err: "after its 5"},
		{name: "start zero", size: 5, ext: "start 0 " + zero + "\n", err: "positive"},
		{name: "leading zero", size: 5, ext: "start 04 " + anchor + "\n", err: "positive"},
		{name: "plus sign", size: 5, ext: "start +4 " + anchor + "\n", err: "positive"},
		{name: "zero anchor after seq 1", size: 5, ext: "start 4 " + zero + "\n", err: "zero anchor"},
		{name: "non-zero anchor at seq 1", size: 5, ext: "start 1 " + anchor + "\n", err: "zero anchor"},
		{name: "short anchor", size: 5, ext: "start 4 AAAA\n", err: "base64"},
		{name: "unpadded anchor", size: 5, ext: "start 4 " + strings.TrimRight(anchor, "=") + "\n", err: "base64"},
		{name: "missing anchor", size: 5, ext: "start 4\n", err: "<seq> <anchor>"},
		{name: "two spaces", size: 5, ext: "start 4  " + anchor + "\n", err: "base64"},
		{name: "start past the end needs the head as anchor", size: 5, ext: "start 6 " + anchor + "\n", err: "not that record's hash"},
		{name: "time not canonical", size: 5, ext: "time 2026-01-02T03:04:05Z\n", err: "time"},
		{name: "line without newline", size: 5, ext: "start 4 " + anchor, err: "newline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Checkpoint{Size: tt.size}
			err := parseExtensions(&c, []byte(tt.ext))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseExtensions(%q) = %v, want an error with %q", tt.ext, err, tt.err)
				}
				return
			}
			if err != nil || c.Start != tt.start {
				t.Fatalf("parseExtensions(%q): start %d, %v; want start %d", tt.ext, c.Start, err, tt.start)
			}
		})
	}
}

// The start line round-trips through signing and opening.
func TestCheckpointStartRoundTrip(t *testing.T) {
	dir := t.TempDir()
	signer, vkey, err := loadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := head{seq: 9, hash: sha256.Sum256([]byte("nine"))}
	st := base{seq: 4, anchor: sha256.Sum256([]byte("three"))}
	msg, err := signCheckpoint(signer, h, st, time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(msg, vkey)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 9 || c.Head != h.hash || c.Start != 4 || c.Anchor != st.anchor || c.Time.UnixMilli() != 1767323045006 {
		t.Fatalf("opened %+v", c)
	}
}

func FuzzCheckpointExtensions(f *testing.F) {
	anchor := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, sha256.Size))
	f.Add(uint64(5), []byte("start 4 "+anchor+"\ntime 2026-01-02T03:04:05.006Z\n"))
	f.Add(uint64(0), []byte("start 1 "+base64.StdEncoding.EncodeToString(make([]byte, 32))+"\n"))
	f.Add(uint64(5), []byte("time 2026-01-02T03:04:05.006Z\n"))
	f.Add(uint64(3), []byte("start 4 "+anchor+"\n"))
	f.Fuzz(func(t *testing.T, size uint64, ext []byte) {
		c := Checkpoint{Size: size}
		if err := parseExtensions(&c, ext); err != nil {
			return
		}
		if c.Start == 0 {
			return
		}
		if c.Start-1 > c.Size || (c.Start == 1) != (c.Anchor == zeroHash) {
			t.Fatalf("accepted start %d, anchor %x for %d records", c.Start, c.Anchor, c.Size)
		}
		// The accepted line has exactly one spelling: the one signing writes.
		line := fmt.Sprintf("%s%d %s\n", startExtension, c.Start, base64.StdEncoding.EncodeToString(c.Anchor[:]))
		if !bytes.Contains(ext, []byte(line)) {
			t.Fatalf("accepted %q, which does not contain its canonical start line %q", ext, line)
		}
	})
}

func TestLastNoteIn(t *testing.T) {
	a := "origin\n1\nAAAA\ntime x\n\n— origin sig1\n"
	b := "origin\n2\nBBBB\ntime y\n\n— origin sig2\n"
	tests := []struct {
		name    string
		data    string
		partial bool
		want    string
	}{
		{name: "two notes", data: a + "\n" + b + "\n", want: b},
		{name: "one note", data: a + "\n", want: a},
		{name: "partial window", data: a[10:] + "\n" + b + "\n", partial: true, want: b},
		{name: "window inside one note", data: a[10:] + "\n", partial: true},
		{name: "empty", data: ""},
		{name: "no blank line", data: "garbage\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(lastNoteIn([]byte(tt.data), tt.partial)); got != tt.want {
				t.Fatalf("lastNoteIn = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzLastNote(f *testing.F) {
	a := "origin\n1\nAAAA\ntime x\n\n— origin sig1\n"
	f.Add([]byte(a+"\n"+a+"\n"), false)
	f.Add([]byte(a[5:]+"\n"), true)
	f.Add([]byte("\n\n\n\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, partial bool) {
		got := lastNoteIn(data, partial)
		if got == nil {
			return
		}
		// It is a suffix of the log and holds the note's blank line.
		if !bytes.HasSuffix(bytes.TrimSuffix(data, []byte("\n")), got) || !bytes.Contains(got, []byte("\n\n")) {
			t.Fatalf("lastNoteIn(%q) = %q", data, got)
		}
	})
}
