package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// File names inside the store's directory.
const (
	keyFile        = "audit.key"
	pubFile        = "audit.pub"
	checkpointFile = "checkpoint"
	checkpointsLog = "checkpoints.log"
)

// timeExtension prefixes the checkpoint's extension line that carries the
// time it was signed (the C2SP checkpoint body allows extension lines after
// the hash).
const timeExtension = "time "

// head is a position in the chain: the count of records and the hash of the
// last one (zeroHash when there is none).
type head struct {
	seq  uint64
	hash [sha256.Size]byte
}

// loadOrCreateKey returns the store's signer and its verifier key line,
// creating the Ed25519 key on first use. The key name is the checkpoint
// origin, fixed at creation so that renaming the host keeps the log's
// identity.
func loadOrCreateKey(dir string) (note.Signer, string, error) {
	data, err := os.ReadFile(filepath.Join(dir, keyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(dir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("read signing key: %w", err)
	}
	skey := strings.TrimSpace(string(data))
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, "", fmt.Errorf("parse signing key: %w", err)
	}
	vkey, err := verifierKey(skey, signer.Name())
	if err != nil {
		return nil, "", err
	}
	if err := writeIfChanged(filepath.Join(dir, pubFile), []byte(vkey+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	return signer, vkey, nil
}

func createKey(dir string) (note.Signer, string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "mcpintercept/audit/"+sanitizeName(host))
	if err != nil {
		return nil, "", fmt.Errorf("generate signing key: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, keyFile), []byte(skey+"\n"), 0o600); err != nil {
		return nil, "", err
	}
	if err := writeAtomic(filepath.Join(dir, pubFile), []byte(vkey+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, "", fmt.Errorf("parse signing key: %w", err)
	}
	return signer, vkey, nil
}

// sanitizeName keeps a key name valid: notes forbid '+' and spaces in names.
func sanitizeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '+' || r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// verifierKey derives the "<name>+<hash>+<base64>" line from the private key
// line "PRIVATE+KEY+<name>+<hash>+<base64(alg, seed)>", so audit.pub can be
// rewritten from audit.key alone.
func verifierKey(skey, name string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("parse signing key: not a note private key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("parse signing key: not an Ed25519 note key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", fmt.Errorf("derive public key: %w", err)
	}
	return vkey, nil
}

// startExtension prefixes the checkpoint's extension line that names where
// the log it commits to begins: "start <seq> <base64 hash of record seq-1>".
// Without it a checkpoint's head proves the records it covers only as far
// back as they happen to remain, so deleting the oldest segments (as
// retention does) could not be told from an attack. With it, the signer
// states that every record from seq up to the count is in the log, and that
// the records before seq were removed on purpose, the last of them hashing
// to the anchor (64 zero bits for seq 1).
const startExtension = "start "

// base is where the log begins: its first seq, and the hash of the record
// before it (zeroHash for seq 1).
type base struct {
	seq    uint64
	anchor [sha256.Size]byte
}

// genesis is the base of a log nothing was ever removed from.
var genesis = base{seq: 1}

// signCheckpoint returns the signed note for h on the base st.
func signCheckpoint(signer note.Signer, h head, st base, at time.Time) ([]byte, error) {
	body := tlog.Checkpoint{Origin: signer.Name(), Size: h.seq, Hash: h.hash[:]}.Marshal()
	body = append(body, startExtension...)
	body = strconv.AppendUint(body, st.seq, 10)
	body = append(body, ' ')
	body = base64.StdEncoding.AppendEncode(body, st.anchor[:])
	body = append(body, '\n')
	body = append(body, timeExtension...)
	body = at.UTC().AppendFormat(body, timeLayout)
	body = append(body, '\n')
	msg, err := note.Sign(&note.Note{Text: string(body)}, signer)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return msg, nil
}

// Checkpoint is a verified checkpoint.
type Checkpoint struct {
	Origin string
	Size   uint64 // count of records it commits to
	Head   [sha256.Size]byte
	Time   time.Time // zero when the note has no time line
	// Start is the first seq the checkpoint commits to: every record from
	// Start to Size is in the log it signs. 0 for a checkpoint written before
	// start lines existed, which names no start.
	Start uint64
	// Anchor is the hash of record Start-1 (zero for Start 1).
	Anchor [sha256.Size]byte
}

// from is the first seq c commits to. An old checkpoint without a start
// line commits to the whole chain its head ends: from seq 1.
func (c Checkpoint) from() uint64 { return max(c.Start, 1) }

// OpenCheckpoint verifies the signature of a checkpoint note with the
// verifier key line vkey and parses it.
func OpenCheckpoint(msg []byte, vkey string) (Checkpoint, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("parse public key: %w", err)
	}
	cp, ext, _, err := tlog.ParseCheckpoint(msg, v.Name(), v)
	if err != nil {
		return Checkpoint{}, err
	}
	if len(cp.Hash) != sha256.Size {
		return Checkpoint{}, fmt.Errorf("checkpoint hash has %d bytes, want %d", len(cp.Hash), sha256.Size)
	}
	c := Checkpoint{Origin: cp.Origin, Size: cp.Size}
	copy(c.Head[:], cp.Hash)
	if err := parseExtensions(&c, ext); err != nil {
		return Checkpoint{}, err
	}
	return c, nil
}

// parseExtensions reads the extension lines of a checkpoint note's body (all
// after the hash line) into c. The note is signed, so its lines are the
// signer's; still, each known line must have exactly one spelling and appear
// at most once, so that two readers never see different checkpoints in one
// note. Unknown lines are skipped: a later version may add some.
func parseExtensions(c *Checkpoint, ext []byte) error {
	sawTime, sawStart := false, false
	for line := range strings.Lines(string(ext)) {
		line, ok := strings.CutSuffix(line, "\n")
		if !ok {
			return errors.New("checkpoint extension line without its newline")
		}
		if t, ok := strings.CutPrefix(line, timeExtension); ok {
			if sawTime {
				return errors.New("checkpoint has two time lines")
			}
			sawTime = true
			at, err := time.Parse(timeLayout, t)
			if err != nil || at.Format(timeLayout) != t {
				return fmt.Errorf("checkpoint time %q is not %s", t, timeLayout)
			}
			c.Time = at
			continue
		}
		if v, ok := strings.CutPrefix(line, startExtension); ok {
			if sawStart {
				return errors.New("checkpoint has two start lines")
			}
			sawStart = true
			if err := parseStart(c, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseStart reads "<seq> <base64 anchor>": seq in canonical decimal, at
// least 1 and at most one past the count (a start after the head would
// commit to records that do not exist), the anchor zero exactly for seq 1.
func parseStart(c *Checkpoint, v string) error {
	seqText, anchorText, ok := strings.Cut(v, " ")
	if !ok {
		return fmt.Errorf("checkpoint start %q is not \"<seq> <anchor>\"", v)
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 10) != seqText {
		return fmt.Errorf("checkpoint start seq %q is not a positive decimal", seqText)
	}
	if seq-1 > c.Size {
		return fmt.Errorf("checkpoint start %d lies after its %d records", seq, c.Size)
	}
	anchor, err := base64.StdEncoding.Strict().DecodeString(anchorText)
	if err != nil || len(anchor) != sha256.Size || base64.StdEncoding.EncodeToString(anchor) != anchorText {
		return fmt.Errorf("checkpoint start anchor %q is not the base64 of %d bytes", anchorText, sha256.Size)
	}
	copy(c.Anchor[:], anchor)
	if (seq == 1) != (c.Anchor == zeroHash) {
		return fmt.Errorf("checkpoint start %d with anchor %s: only seq 1 has the zero anchor", seq, anchorText)
	}
	if seq-1 == c.Size && c.Anchor != c.Head {
		return fmt.Errorf("checkpoint starts after its last record, %d, but its anchor is not that record's hash", c.Size)
	}
	c.Start = seq
	return nil
}

// splitCheckpoints cuts checkpoints.log into its notes; each note ends with
// its signature block followed by a blank line.
func splitCheckpoints(data []byte) [][]byte {
	var notes [][]byte
	for len(data) > 0 {
		end := bytes.Index(data, []byte("\n\n"))
		// A note's text and signatures are separated by one blank line, so
		// the note ends at the second blank line.
		if end < 0 {
			notes = append(notes, data)
			break
		}
		next := bytes.Index(data[end+2:], []byte("\n\n"))
		if next < 0 {
			notes = append(notes, data)
			break
		}
		cut := end + 2 + next + 1
		notes = append(notes, data[:cut])
		data = data[cut+1:]
	}
	return notes
}

// writeAtomic replaces path with data so a crash leaves the old or the new
// content, never a mix.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	defer os.Remove(tmp.Name())
	if err := writeSynced(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return syncDir(filepath.Dir(path))
}

func writeSynced(f *os.File, data []byte, perm os.FileMode) error {
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeIfChanged(path string, data []byte, perm os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return writeAtomic(path, data, perm)
}

// appendSynced appends data to path and makes it durable.
func appendSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("append %s: %w", filepath.Base(path), err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", filepath.Base(path), err)
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", filepath.Base(path), err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}
