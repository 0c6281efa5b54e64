package devhost

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTrustEnv: the child's environment names a bundle of the base store plus the appliance CA
// for OpenSSL, Go, curl, git and Python, and the user's extra file plus the CA for Node; every
// other variable is kept, every old value of those five replaced.
func TestTrustEnv(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := write("ca.pem", "APPLIANCE-CA\n")
	base := write("base.pem", "USER-BASE\n")
	extra := write("extra.pem", "USER-EXTRA\n")
	systemBundle = write("system.pem", "SYSTEM\n")
	missing := filepath.Join(dir, "missing.pem")
	vars := []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}
	tests := []struct {
		name      string
		env       []string
		bundle    string
		nodeExtra string
		caFile    string
		err       string
	}{
		{name: "nothing set: the system store", env: []string{"PATH=/bin"},
			bundle: "SYSTEM\n\nAPPLIANCE-CA\n", nodeExtra: "APPLIANCE-CA\n"},
		{name: "the user's SSL_CERT_FILE and NODE_EXTRA_CA_CERTS", env: []string{"PATH=/bin", "SSL_CERT_FILE=" + base, "NODE_EXTRA_CA_CERTS=" + extra},
			bundle: "USER-BASE\n\nAPPLIANCE-CA\n", nodeExtra: "USER-EXTRA\n\nAPPLIANCE-CA\n"},
		{name: "old values replaced", env: []string{"CURL_CA_BUNDLE=/old", "GIT_SSL_CAINFO=/old", "REQUESTS_CA_BUNDLE=/old", "PATH=/bin"},
			bundle: "SYSTEM\n\nAPPLIANCE-CA\n", nodeExtra: "APPLIANCE-CA\n"},
		{name: "unreadable files named by the environment: the CA alone", env: []string{"PATH=/bin", "SSL_CERT_FILE=" + missing, "NODE_EXTRA_CA_CERTS=" + missing},
			bundle: "APPLIANCE-CA\n", nodeExtra: "APPLIANCE-CA\n"},
		{name: "a device is not read", env: []string{"PATH=/bin", "SSL_CERT_FILE=/dev/zero"},
			bundle: "APPLIANCE-CA\n", nodeExtra: "APPLIANCE-CA\n"},
		{name: "no CA: an error, no directory", env: []string{"PATH=/bin"}, caFile: missing, err: "appliance CA"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			caFile := ca
			if tc.caFile != "" {
				caFile = tc.caFile
			}
			env, trustDir, err := trustEnv(tc.env, caFile, nil)
			if trustDir != "" {
				defer os.RemoveAll(trustDir)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || trustDir != "" {
					t.Fatalf("err %v, dir %q; want %q and no directory", err, trustDir, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(trustDir); err != nil || st.Mode().Perm() != 0o700 {
				t.Fatalf("trust dir %v, %v; want 0700", st, err)
			}
			got := map[string]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				if _, dup := got[k]; dup {
					t.Errorf("%s set twice", k)
				}
				got[k] = v
			}
			if got["PATH"] != "/bin" {
				t.Errorf("PATH = %q, want it kept", got["PATH"])
			}
			for _, k := range vars {
				if filepath.Dir(got[k]) != trustDir {
					t.Errorf("%s = %q, not in %s", k, got[k], trustDir)
				}
			}
			if got["SSL_CERT_FILE"] != got["CURL_CA_BUNDLE"] || got["SSL_CERT_FILE"] != got["REQUESTS_CA_BUNDLE"] || got["SSL_CERT_FILE"] != got["GIT_SSL_CAINFO"] {
				t.Errorf("the bundle variables disagree: %v", got)
			}
			for file, want := range map[string]string{got["SSL_CERT_FILE"]: tc.bundle, got["NODE_EXTRA_CA_CERTS"]: tc.nodeExtra} {
				b, err := os.ReadFile(file)
				if err != nil || string(b) != want {
					t.Errorf("%s = %q, %v; want %q", filepath.Base(file), b, err, want)
				}
				if st, _ := os.Stat(file); st == nil || st.Mode().Perm() != 0o644 {
					t.Errorf("%s mode %v, want 0644", file, st)
				}
			}
			if !slices.Contains(env, "PATH=/bin") {
				t.Error("PATH lost")
			}
		})
	}
}
