package devhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// systemBundle is the bundle the usual TLS stacks read when SSL_CERT_FILE is not set.
var systemBundle = "/etc/ssl/certs/ca-certificates.crt"

// trustEnv makes the usual TLS stacks trust the appliance CA in the child: OpenSSL, Go, curl, git
// and Python read a bundle that replaces the system store, so they get the system bundle plus the
// CA; Node adds NODE_EXTRA_CA_CERTS to its own store, so it gets the CA (plus whatever extra file
// the user had set). The files go to a fresh 0700 directory that belongs to the command's user
// (cred; nil: exec's own), removed by the caller at exit; the files the environment names are read
// with that user's permissions, and only the CA certificate (never its key) is read as root.
func trustEnv(env []string, caFile string, cred *syscall.Credential) ([]string, string, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, "", fmt.Errorf("appliance CA: %w", err)
	}
	dir, root, err := newTrustDir(cred)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	get := func(k string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	bundle := []byte{}
	base := get("SSL_CERT_FILE")
	if base == "" {
		base = systemBundle
	}
	if b, err := readFileAs(base, cred); err == nil {
		bundle = append(bundle, b...)
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	bundlePath := filepath.Join(dir, "bundle.pem")
	if err := writeTrustFile(root, "bundle.pem", bundle); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	extra := append([]byte{}, ca...)
	if user := get("NODE_EXTRA_CA_CERTS"); user != "" {
		if b, err := readFileAs(user, cred); err == nil {
			extra = append(append(b, '\n'), ca...)
		}
	}
	extraPath := filepath.Join(dir, "node-extra.pem")
	if err := writeTrustFile(root, "node-extra.pem", extra); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	if err := handOver(root, cred); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	set := map[string]string{
		"SSL_CERT_FILE": bundlePath, "REQUESTS_CA_BUNDLE": bundlePath, "CURL_CA_BUNDLE": bundlePath,
		"GIT_SSL_CAINFO": bundlePath, "NODE_EXTRA_CA_CERTS": extraPath,
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out, dir, nil
}
