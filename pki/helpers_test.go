package pki

import (
	"crypto/ecdsa"
	"encoding/hex"
	"encoding/pem"
	"os"
	"testing"
)

func chmod(t *testing.T, path string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, m); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string, m os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, m); err != nil {
		t.Fatal(err)
	}
}

func writePEM(t *testing.T, path, typ string, der []byte, m os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), m); err != nil {
		t.Fatal(err)
	}
}

// keyMaterial returns renderings of the CA's private scalar a leak would contain.
func keyMaterial(t *testing.T, ca *CA) []string {
	t.Helper()
	k, ok := ca.Key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("key is %T", ca.Key)
	}
	b, err := k.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return []string{k.D.String(), k.D.Text(16), hex.EncodeToString(b)}
}

var sharedDirs []string

// makeTempDir is for fixtures shared across tests, which outlive any one t.TempDir; TestMain
// removes them.
func makeTempDir() (string, error) {
	d, err := os.MkdirTemp("", "pki-test-")
	if err == nil {
		sharedDirs = append(sharedDirs, d)
	}
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range sharedDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}
