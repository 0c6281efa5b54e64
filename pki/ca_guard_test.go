//go:build unix

package pki

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// caOps are the entry points that must all refuse an unsafe CA directory or key.
var caOps = []struct {
	name string
	run  func(dir string) error
}{
	{"Load", func(dir string) error { _, err := Load(dir); return err }},
	{"LoadOrInit", func(dir string) error { _, _, err := LoadOrInit(dir); return err }},
	{"Init --force", func(dir string) error { _, err := Init(dir, true); return err }},
}

func wantErr(t *testing.T, op string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded, want an error mentioning %q", op, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s error %q does not mention %q", op, err, w)
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue 8 case 12: a ca.dir others can write lets them replace the key or the certificate, so
// none of Load, LoadOrInit or Init may use it, and Init must not write into it.
func TestRefusesDirWritableByOthers(t *testing.T) {
	for _, m := range []os.FileMode{0o777, 0o770, 0o720, 0o757, 0o702, 0o777 | os.ModeSticky} {
		name := fmt.Sprintf("%04o", m.Perm())
		if m&os.ModeSticky != 0 {
			name += " sticky"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Init(dir, false); err != nil {
				t.Fatal(err)
			}
			key := readFile(t, filepath.Join(dir, KeyFile))
			chmod(t, dir, m)
			for _, op := range caOps {
				wantErr(t, op.name, op.run(dir), dir, fmt.Sprintf("mode %04o", m.Perm()), "writable by group or others", "chmod 700 "+dir)
			}
			if !bytes.Equal(readFile(t, filepath.Join(dir, KeyFile)), key) {
				t.Error("Init --force replaced the key in an unsafe directory")
			}
			chmod(t, dir, 0o700)
			if _, err := Load(dir); err != nil {
				t.Errorf("Load after chmod 700: %v", err)
			}
		})
	}
	t.Run("empty dir", func(t *testing.T) {
		dir := t.TempDir()
		chmod(t, dir, 0o777)
		_, err := Init(dir, false)
		wantErr(t, "Init", err, dir, "mode 0777", "chmod 700 "+dir)
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("Init wrote %d entries into an unsafe directory", len(entries))
		}
	})
	t.Run("0755 is fine", func(t *testing.T) {
		dir := t.TempDir()
		chmod(t, dir, 0o755)
		if _, _, err := LoadOrInit(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err != nil {
			t.Fatal(err)
		}
	})
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the owner checks need root to chown a file to another uid (CI runs the tests as root)")
	}
}

const otherUID = 4242

func TestRefusesDirOwnedByAnotherUser(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if _, err := Init(dir, false); err != nil {
		t.Fatal(err)
	}
	key := readFile(t, filepath.Join(dir, KeyFile))
	if err := os.Chown(dir, otherUID, -1); err != nil {
		t.Fatal(err)
	}
	for _, op := range caOps {
		wantErr(t, op.name, op.run(dir), dir, fmt.Sprintf("owned by uid %d", otherUID), "running user (uid 0)", "chown 0 "+dir)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, KeyFile)), key) {
		t.Error("Init --force replaced the key in a directory another user owns")
	}

	empty := t.TempDir()
	if err := os.Chown(empty, otherUID, -1); err != nil {
		t.Fatal(err)
	}
	_, err := Init(empty, false)
	wantErr(t, "Init into a foreign empty dir", err, empty, fmt.Sprintf("owned by uid %d", otherUID), "chown 0 "+empty)
}

func TestRefusesKeyOwnedByAnotherUser(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if _, err := Init(dir, false); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, KeyFile)
	if err := os.Chown(keyPath, otherUID, -1); err != nil {
		t.Fatal(err)
	}
	for _, op := range caOps[:2] {
		wantErr(t, op.name, op.run(dir), keyPath, fmt.Sprintf("owned by uid %d", otherUID), "running user (uid 0)", "chown 0 "+keyPath)
	}
	if err := os.Chown(keyPath, 0, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("Load after chown back: %v", err)
	}
}

// A key that is a link is refused even when its target looks right: whoever controls the target
// (or the link) controls the key.
func TestRefusesSymlinkedKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, false); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, KeyFile)
	elsewhere := filepath.Join(t.TempDir(), "real-key.pem")
	if err := os.Rename(keyPath, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, keyPath); err != nil {
		t.Fatal(err)
	}
	for _, op := range caOps[:2] {
		wantErr(t, op.name, op.run(dir), keyPath, "symbolic link")
	}
}
