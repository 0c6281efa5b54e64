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

// signCheckpoint returns the signed note for h.
func signCheckpoint(signer note.Signer, h head, at time.Time) ([]byte, error) {
	body := tlog.Checkpoint{Origin: signer.Name(), Size: h.seq, Hash: h.hash[:]}.Marshal()
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
}

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
	for line := range strings.Lines(string(ext)) {
		if t, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), timeExtension); ok {
			if c.Time, err = time.Parse(timeLayout, t); err != nil {
				return Checkpoint{}, fmt.Errorf("checkpoint time: %w", err)
			}
		}
	}
	return c, nil
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
