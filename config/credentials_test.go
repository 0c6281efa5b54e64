package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCredentialsDefaults: other and subject_token_type may be left out (refuse, access_token, as
// documented); a wrong value of either is still refused.
func TestCredentialsDefaults(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "x.token")
	if err := os.WriteFile(secret, []byte("v\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	route := func(creds string) string {
		return withRoutes + "  - name: c\n    match: {destinations: [10.0.0.1/32], ports: [443]}\n    tls: plaintext\n" +
			"    level: 2\n    development: true\n    credentials:\n" + creds
	}
	inject := "      inject: {file: " + secret + "}\n"
	exchange := "      exchange:\n        token_endpoint: https://as.example/token\n        client_id: me\n" +
		"        client_secret_file: " + secret + "\n"
	for name, src := range map[string]string{"inject": route(inject), "exchange": route(exchange)} {
		c, err := Parse("test.yaml", []byte(src), Overrides{})
		if err != nil {
			t.Fatalf("%s without other (and subject_token_type): %v", name, err)
		}
		if cr := c.Routes[0].Credentials; !cr.On() || cr.Other != "" {
			t.Errorf("%s: credentials %+v", name, cr)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{route(inject + "      other: drop\n"), `credentials.other: unknown value "drop" (valid: refuse, strip)`},
		{route(exchange + "        subject_token_type: saml\n"), `credentials.exchange.subject_token_type: unknown value "saml"`},
	} {
		_, err := Parse("test.yaml", []byte(tc.src), Overrides{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}
