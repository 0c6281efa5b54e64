package audit

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// tamperLog writes 10 records in one segment, closes the store (so the last
// checkpoint covers all 10), and returns the directory, the segment's path
// and its lines.
func tamperLog(t *testing.T) (dir, seg string, lines [][]byte) {
	t.Helper()
	dir = t.TempDir()
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 10)
	closeStore(t, s)
	seg = filepath.Join(dir, segmentName(1))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	return dir, seg, bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	data := bytes.Join(lines, nil)
	if !bytes.HasSuffix(data, []byte("\n")) {
		data = append(data, '\n')
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir, seg string, lines [][]byte)
		kind   ProblemKind
		line   int
		seq    uint64
	}{
		{"changed byte in a middle record", func(t *testing.T, dir, seg string, lines [][]byte) {
			lines[4] = bytes.Replace(lines[4], []byte(`"tool":"tool4"`), []byte(`"tool":"tool5"`), 1)
			writeLines(t, seg, lines)
		}, Changed, 5, 5},
		{"changed byte in the last record", func(t *testing.T, dir, seg string, lines [][]byte) {
			lines[9] = bytes.Replace(lines[9], []byte(`"decision":"allow"`), []byte(`"decision":"alloW"`), 1)
			writeLines(t, seg, lines)
		}, Changed, 10, 10},
		{"changed byte that breaks the syntax", func(t *testing.T, dir, seg string, lines [][]byte) {
			lines[2][0] = '['
			writeLines(t, seg, lines)
		}, Changed, 3, 0},
		{"changed prev", func(t *testing.T, dir, seg string, lines [][]byte) {
			flipHexDigit(lines[6], bytes.Index(lines[6], []byte(`"prev":"`))+len(`"prev":"`))
			writeLines(t, seg, lines)
		}, Changed, 7, 7},
		{"deleted record", func(t *testing.T, dir, seg string, lines [][]byte) {
			writeLines(t, seg, append(lines[:3:3], lines[4:]...))
		}, Deleted, 4, 4},
		{"two swapped records", func(t *testing.T, dir, seg string, lines [][]byte) {
			lines[5], lines[6] = lines[6], lines[5]
			writeLines(t, seg, lines)
		}, Reordered, 6, 7},
		{"cut tail", func(t *testing.T, dir, seg string, lines [][]byte) {
			writeLines(t, seg, lines[:7])
		}, Truncated, 0, 8},
		{"forged checkpoint", func(t *testing.T, dir, seg string, lines [][]byte) {
			path := filepath.Join(dir, checkpointFile)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, bytes.Replace(data, []byte("\n10\n"), []byte("\n11\n"), 1), 0o644)
		}, BadSignature, 0, 0},
		{"forged checkpoints.log entry", func(t *testing.T, dir, seg string, lines [][]byte) {
			path := filepath.Join(dir, checkpointsLog)
			data, _ := os.ReadFile(path)
			os.WriteFile(path, bytes.Replace(data, []byte("\n10\n"), []byte("\n9\n"), 1), 0o644)
		}, BadSignature, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, seg, lines := tamperLog(t)
			mustVerify(t, dir, VerifyOptions{})
			tt.tamper(t, dir, seg, lines)
			rep, err := Verify(dir, VerifyOptions{})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			p := rep.Problem
			if p == nil {
				t.Fatalf("Verify passed a tampered log: %+v", rep)
			}
			if p.Kind != tt.kind || p.Line != tt.line || p.Seq != tt.seq {
				t.Fatalf("Verify found %s; want kind %s, line %d, seq %d", p, tt.kind, tt.line, tt.seq)
			}
		})
	}
}

// A cut tail that also removes the checkpoint files on the box is caught by
// a checkpoint kept elsewhere.
func TestVerifyAgainstShippedCheckpoint(t *testing.T) {
	dir, seg, lines := tamperLog(t)
	shipped, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, dir, VerifyOptions{Checkpoint: shipped})
	writeLines(t, seg, lines[:8])
	os.Remove(filepath.Join(dir, checkpointFile))
	os.Remove(filepath.Join(dir, checkpointsLog))
	mustVerify(t, dir, VerifyOptions{}) // nothing on the box shows it
	rep, err := Verify(dir, VerifyOptions{Checkpoint: shipped})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || rep.Problem.Kind != Truncated {
		t.Fatalf("Verify against the shipped checkpoint: %+v", rep.Problem)
	}
}

// A checkpoint signed by another key, for the same origin, is refused.
func TestVerifyRefusesForeignCheckpoint(t *testing.T) {
	dir, _, _ := tamperLog(t)
	pub, err := os.ReadFile(filepath.Join(dir, pubFile))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.SplitN(string(pub), "+", 2)[0]
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := signCheckpoint(signer, head{seq: 10}, genesis, timeNowForTest())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, VerifyOptions{Checkpoint: foreign})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || rep.Problem.Kind != BadSignature {
		t.Fatalf("Verify with a foreign checkpoint: %+v", rep.Problem)
	}
}

// A replaced audit.pub (with audit.key, so the attacker can re-sign) is
// caught when the operator passes the key kept elsewhere.
func TestVerifyWithPinnedKey(t *testing.T) {
	dir, _, _ := tamperLog(t)
	pub, _ := os.ReadFile(filepath.Join(dir, pubFile))
	os.Remove(filepath.Join(dir, keyFile))
	os.Remove(filepath.Join(dir, pubFile))
	os.Remove(filepath.Join(dir, checkpointFile))
	s := openStore(t, Config{Dir: dir}) // a new key re-signs the head
	closeStore(t, s)
	rep, err := Verify(dir, VerifyOptions{PublicKey: string(pub)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || rep.Problem.Kind != BadSignature {
		t.Fatalf("Verify with the pinned key after a key swap: %+v", rep.Problem)
	}
}

func TestVerifyRetentionChecksCheckpointBeforeStart(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 1500, RetainSegments: 2})
	appendN(t, s, 0, 30)
	closeStore(t, s)
	rep := mustVerify(t, dir, VerifyOptions{})
	if rep.Start <= 1 || rep.Skipped == 0 {
		t.Fatalf("report %+v: want a start after 1 and skipped checkpoints", rep)
	}
	// Deleting the oldest remaining segment too shifts the start; the
	// checkpoint at Start-1 is what notices when it is still in the log.
	segs, _ := listSegments(dir)
	first := filepath.Join(dir, segs[0].name)
	data, _ := os.ReadFile(first)
	flipHexDigit(data, bytes.Index(data, []byte(`"prev":"`))+len(`"prev":"`))
	os.WriteFile(first, data, 0o600)
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || rep.Problem.Kind != Changed {
		t.Fatalf("a changed prev at the start of a retained log: %+v", rep.Problem)
	}
}

func TestVerifyUnreadable(t *testing.T) {
	if _, err := Verify(t.TempDir(), VerifyOptions{}); err == nil {
		t.Fatal("Verify of a directory without a key: nil error")
	}
	if _, err := Verify(t.TempDir(), VerifyOptions{PublicKey: "garbage"}); err == nil {
		t.Fatal("Verify with a garbage key: nil error")
	}
}

// flipHexDigit changes the hex digit at b[i] into another hex digit, so the
// line still decodes and only the chain can tell.
func flipHexDigit(b []byte, i int) {
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
}
