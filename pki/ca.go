package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names inside a CA directory. They are fixed so that `ca export`, `run` and an operator's
// own tooling all agree on where the CA lives.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
)

// caValidity is long because every client that trusts the CA has to be re-provisioned when it
// changes; the leaves, not the CA, carry the short lifetimes.
const caValidity = 10 * 365 * 24 * time.Hour

// caBackdate keeps a freshly created CA valid on clients whose clocks run a little behind.
const caBackdate = time.Hour

// CA is the appliance's issuing certificate authority. Key is the signing key: the type
// deliberately prints, logs and marshals without it (see redact.go).
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	Dir     string
}

// Init creates a new ECDSA P-256 CA in dir (created 0700 if missing) and writes ca.pem (0644) and
// ca-key.pem (0600). It refuses to replace an existing CA unless force is set, because every
// client that trusted the old one would silently stop trusting the appliance.
func Init(dir string, force bool) (*CA, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			_, err := os.Lstat(p)
			if err == nil {
				return nil, fmt.Errorf("pki: %s already exists; use --force to replace the CA (clients trusting it must be re-provisioned)", p)
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("pki: check %s: %w", p, err)
			}
		}
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate ca key: %w", err)
	}
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("pki: generate ca id: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The random id tells CAs of different appliances apart in a client's trust store.
		Subject: pkix.Name{
			CommonName:   "mcpintercept CA " + hex.EncodeToString(id),
			Organization: []string{"mcpintercept"},
		},
		NotBefore:             now.Add(-caBackdate),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// Path length 0: the CA signs leaves only, so a stolen leaf key cannot become a CA.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: create ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse new ca certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal ca key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	clear(keyDER)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})

	// The key goes first: a crash between the two renames leaves a key without a certificate,
	// which Load reports, rather than a certificate whose key is gone.
	err = writeAtomic(keyPath, keyPEM, 0o600)
	clear(keyPEM)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, Dir: dir}, nil
}

// Load reads the CA from dir. It refuses a key file that group or others can read or write: a
// CA key anyone on the host can copy lets them impersonate every server the clients talk to.
func Load(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	keyPEM, err := readPrivate(keyPath)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(keyPEM)
	clear(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", keyPath, err)
	}
	raw, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read ca certificate: %w", err)
	}
	cert, err := parseCert(raw)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", certPath, err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, fmt.Errorf("pki: %s is not a CA certificate (basic constraints CA:FALSE or missing)", certPath)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("pki: %s lacks the certSign key usage", certPath)
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("pki: %s does not match the certificate in %s", keyPath, certPath)
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("pki: ca certificate %s expired on %s; create a new one with --force", certPath, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, Dir: dir}, nil
}

// LoadOrInit loads the CA from dir, creating one only when neither file exists. A half-present
// CA (one file missing) is an error, never silently replaced.
func LoadOrInit(dir string) (ca *CA, created bool, err error) {
	missing := 0
	for _, name := range []string{CertFile, KeyFile} {
		_, err := os.Lstat(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing++
		case err != nil:
			return nil, false, fmt.Errorf("pki: check %s: %w", filepath.Join(dir, name), err)
		}
	}
	if missing == 2 {
		ca, err := Init(dir, false)
		return ca, err == nil, err
	}
	ca, err = Load(dir)
	return ca, false, err
}

// ExportFormats lists what Export accepts, in the order error messages and help text show them.
var ExportFormats = []string{"pem", "der"}

// Export returns the CA certificate (never the key) for installation in client trust stores.
func (ca *CA) Export(format string) ([]byte, error) {
	switch strings.ToLower(format) {
	case "pem":
		return bytes.Clone(ca.CertPEM), nil
	case "der":
		return bytes.Clone(ca.Cert.Raw), nil
	}
	return nil, fmt.Errorf("pki: unknown export format %q (valid: %s)", format, strings.Join(ExportFormats, ", "))
}

func ensureDir(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("pki: %s is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki: check ca directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: create ca directory: %w", err)
	}
	// MkdirAll's mode is filtered by the umask; the directory must end up exactly 0700.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("pki: chmod ca directory: %w", err)
	}
	return nil
}

// writeAtomic replaces path with data so that a reader sees either the old file or the complete
// new one, and never the key under a looser mode than the final one.
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("pki: chmod %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("pki: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("pki: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: rename %s: %w", tmp, err)
	}
	// Persist the rename itself; without it a power cut can lose the new name.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// readPrivate reads a key file after checking its mode on the opened descriptor, so the file
// checked is the file read.
func readPrivate(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pki: open ca key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pki: stat ca key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("pki: ca key %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("pki: ca key %s has mode %04o, accessible by group or others; run chmod 600 %s", path, perm, path)
	}
	// The limit keeps a wrong path (a device, a huge file) from exhausting memory.
	const maxKeyFile = 64 << 10
	if fi.Size() > maxKeyFile {
		return nil, fmt.Errorf("pki: ca key %s is larger than %d bytes", path, maxKeyFile)
	}
	// One buffer of the exact size, so no partial copies of the key are left behind for the
	// garbage collector, and the caller can clear it.
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		clear(buf)
		return nil, fmt.Errorf("pki: read ca key: %w", err)
	}
	return buf, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	defer clear(block.Bytes)
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q (want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)", block.Type)
	}
	if err != nil {
		// The parse error never quotes key material, but say only what kind of failure it was.
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case *rsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, fmt.Errorf("unsupported private key type %T", key)
}

func parseCert(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no CERTIFICATE PEM block found")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		return cert, nil
	}
}

// randomSerial returns a positive serial of 128 random bits; RFC 5280 asks for unpredictable
// serials of at most 20 octets.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("pki: generate serial: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
