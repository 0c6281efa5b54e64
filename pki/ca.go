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

	"software.sslmate.com/src/go-pkcs12"
)

// File names inside a CA directory. They are fixed so that `ca export`, `run` and an operator's
// own tooling all agree on where the CA lives.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
	// LockFile is flocked by whoever creates the CA (`ca init`, or `run` on first start), so
	// concurrent creations are serialized. It stays in place: removing a lock file races with
	// the next locker.
	LockFile = ".lock"
)

// A creation stages the new files under these names before renaming them into place; see
// create and recoverPending.
const (
	pendingKey  = ".ca-key.pem.new"
	pendingCert = ".ca.pem.new"
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
//
// Init holds an exclusive lock on dir/.lock for the whole check-and-create, so two concurrent
// inits cannot interleave their files, and it refuses a directory others could write (see
// checkDir).
func Init(dir string, force bool) (*CA, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := recoverPending(dir); err != nil {
		return nil, err
	}
	if !force {
		for _, name := range []string{CertFile, KeyFile} {
			p := filepath.Join(dir, name)
			ok, err := exists(p)
			if err != nil {
				return nil, err
			}
			if ok {
				return nil, fmt.Errorf("pki: %s already exists; use --force to replace the CA (clients trusting it must be re-provisioned)", p)
			}
		}
	}
	return create(dir)
}

// Load reads the CA from dir. It refuses a directory that group or others can write or that
// another user owns, and a key file that is a symbolic link, that another user owns, or that
// group or others can read or write: a CA key anyone else on the host can copy or replace lets
// them impersonate every server the clients talk to.
func Load(dir string) (*CA, error) {
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	pending, err := exists(filepath.Join(dir, pendingCert))
	if err != nil {
		return nil, err
	}
	var unlock func()
	if pending {
		// An init was interrupted after staging both files; finish it before reading.
		if unlock, err = lockDir(dir); err != nil {
			return nil, err
		}
		defer unlock()
		if err := recoverPending(dir); err != nil {
			return nil, err
		}
	} else {
		if unlock, err = lockDirShared(dir); err != nil {
			return nil, err
		}
		defer unlock()
	}
	return load(dir)
}

// LoadOrInit loads the CA from dir, creating one only when neither file exists. A half-present
// CA (one file missing) is an error, never silently replaced. Creation happens under the same
// lock as Init, and the files are checked again once it is held: of several processes starting
// at once, one creates the CA and the others load it.
func LoadOrInit(dir string) (ca *CA, created bool, err error) {
	// A complete CA loads without taking the exclusive lock, so a read-only ca.dir keeps working.
	if ok, err := complete(dir); err != nil {
		return nil, false, err
	} else if ok {
		ca, err := Load(dir)
		return ca, false, err
	}
	if err := ensureDir(dir); err != nil {
		return nil, false, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	if err := recoverPending(dir); err != nil {
		return nil, false, err
	}
	missing := 0
	for _, name := range []string{CertFile, KeyFile} {
		ok, err := exists(filepath.Join(dir, name))
		if err != nil {
			return nil, false, err
		}
		if !ok {
			missing++
		}
	}
	if missing == 2 {
		ca, err := create(dir)
		return ca, err == nil, err
	}
	ca, err = load(dir)
	return ca, false, err
}

// complete reports whether dir holds both CA files and nothing an interrupted creation left
// behind (which only the locked path cleans up).
func complete(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pki: read ca directory: %w", err)
	}
	found := 0
	for _, e := range entries {
		switch n := e.Name(); {
		case n == CertFile || n == KeyFile:
			found++
		case n == pendingKey || n == pendingCert || isTemp(n):
			return false, nil
		}
	}
	return found == 2, nil
}

// isTemp reports whether name is one of writeAtomic's temporary files for a CA file.
func isTemp(name string) bool {
	for _, n := range []string{KeyFile, CertFile, pendingKey, pendingCert} {
		if strings.HasPrefix(name, "."+n+".tmp-") {
			return true
		}
	}
	return false
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("pki: check %s: %w", path, err)
}

// create generates a CA and writes it into dir. The caller holds the exclusive lock.
func create(dir string) (*CA, error) {
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

	// Both files are staged complete before either final name changes. The staged certificate is
	// the commit point: once it exists, recoverPending finishes the renames; before it exists, it
	// discards the staged key. Either way a crash leaves the old pair or the new pair.
	err = writeAtomic(filepath.Join(dir, pendingKey), keyPEM, 0o600)
	clear(keyPEM)
	if err != nil {
		return nil, err
	}
	hook("key staged")
	if err := writeAtomic(filepath.Join(dir, pendingCert), certPEM, 0o644); err != nil {
		os.Remove(filepath.Join(dir, pendingKey))
		return nil, err
	}
	hook("staged")
	if err := commitPending(dir); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, Dir: dir}, nil
}

// testHookCommit, when set by a test, is called at each step of a creation so that a test can
// crash the process there.
var testHookCommit func(stage string)

func hook(stage string) {
	if testHookCommit != nil {
		testHookCommit(stage)
	}
}

// commitPending moves the staged files to their final names, the key first and the certificate
// last. The caller holds the exclusive lock.
func commitPending(dir string) error {
	pk, pc := filepath.Join(dir, pendingKey), filepath.Join(dir, pendingCert)
	// The staged key is gone if a previous commit renamed it and then crashed.
	if err := os.Rename(pk, filepath.Join(dir, KeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki: rename %s: %w", pk, err)
	}
	hook("key committed")
	if err := os.Rename(pc, filepath.Join(dir, CertFile)); err != nil {
		return fmt.Errorf("pki: rename %s: %w", pc, err)
	}
	syncDir(dir)
	return nil
}

// recoverPending completes or discards a creation that a crash interrupted, and removes temporary
// files left behind (one of which may hold a key). The caller holds the exclusive lock.
func recoverPending(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("pki: read ca directory: %w", err)
	}
	for _, e := range entries {
		if isTemp(e.Name()) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	staged, err := exists(filepath.Join(dir, pendingCert))
	if err != nil {
		return err
	}
	if staged {
		return commitPending(dir)
	}
	if err := os.Remove(filepath.Join(dir, pendingKey)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki: remove %s: %w", filepath.Join(dir, pendingKey), err)
	}
	return nil
}

// load reads and checks the CA files; the caller has checked the directory.
func load(dir string) (*CA, error) {
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

// ExportFormats lists what Export accepts, in the order error messages and help text show them.
var ExportFormats = []string{"pem", "der", "p12"}

// P12Password is the password of the PKCS#12 file Export("p12") writes. The file holds only the
// public CA certificate, so the password protects nothing; it is the customary "changeit" because
// the macOS keychain and some Windows tools refuse a PKCS#12 file with an empty password.
const P12Password = pkcs12.DefaultPassword

// Export returns the CA certificate (never the key) for installation in client trust stores.
// "p12" is a PKCS#12 trust store holding that one certificate (no key bag), password P12Password,
// in the legacy 3DES/SHA-1 encoding: the one macOS keychains and Windows before Server 2019 read
// (the AES encoding of newer tools is refused there), and its weakness hides nothing public.
func (ca *CA) Export(format string) ([]byte, error) {
	switch strings.ToLower(format) {
	case "pem":
		return bytes.Clone(ca.CertPEM), nil
	case "der":
		return bytes.Clone(ca.Cert.Raw), nil
	case "p12":
		b, err := pkcs12.LegacyDES.EncodeTrustStore([]*x509.Certificate{ca.Cert}, P12Password)
		if err != nil {
			return nil, fmt.Errorf("pki: encode pkcs#12: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("pki: unknown export format %q (valid: %s)", format, strings.Join(ExportFormats, ", "))
}

// ensureDir creates dir 0700 if it is missing, then checks it as checkDir does.
func ensureDir(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("pki: %s is not a directory", dir)
		}
		return checkDir(dir)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pki: check ca directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(filepath.Clean(dir)), 0o700); err != nil {
		return fmt.Errorf("pki: create ca directory: %w", err)
	}
	switch err := os.Mkdir(dir, 0o700); {
	case err == nil:
		// Mkdir's mode is filtered by the umask; the directory must end up exactly 0700.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("pki: chmod ca directory: %w", err)
		}
	case errors.Is(err, fs.ErrExist):
		// Someone else created it meanwhile (a concurrent init); it gets checked like any other.
	default:
		return fmt.Errorf("pki: create ca directory: %w", err)
	}
	return checkDir(dir)
}

// checkDir refuses a CA directory that group or others can write, or that another user owns:
// whoever can write it can replace the key or the certificate (or plant a link) between a check
// and a use, so the file checks below would prove nothing. A link to the directory is followed,
// and its target is what gets checked.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("pki: ca directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("pki: %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("pki: ca directory %s has mode %04o, writable by group or others, who could replace the CA key; run chmod 700 %s", dir, perm, dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("pki: ca directory %s is owned by uid %d, not by the running user (uid %d); run chown %d %s (or run as uid %d)", dir, uid, os.Geteuid(), os.Geteuid(), dir, uid)
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
	syncDir(dir)
	return nil
}

// syncDir persists renames in dir; without it a power cut can lose the new names.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// readPrivate reads a key file after checking it on the opened descriptor, so the file checked
// is the file read. A symbolic link is refused rather than followed: whoever controls its target
// controls the key.
func readPrivate(path string) ([]byte, error) {
	lfi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("pki: open ca key: %w", err)
	}
	if lfi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("pki: ca key %s is a symbolic link; refusing to follow it: replace the link with the key file itself (owned by the running user, mode 0600)", path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNoFollow, 0)
	if err != nil {
		return nil, fmt.Errorf("pki: open ca key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("pki: stat ca key: %w", err)
	}
	if !os.SameFile(lfi, fi) {
		return nil, fmt.Errorf("pki: ca key %s was replaced while it was being opened", path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("pki: ca key %s is not a regular file", path)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return nil, fmt.Errorf("pki: ca key %s is owned by uid %d, not by the running user (uid %d); run chown %d %s", path, uid, os.Geteuid(), os.Geteuid(), path)
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
