package pki

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// The CA carries its private key in an exported field, so printing, logging or marshalling the
// struct with the default rules would write the key out (ecdsa.PrivateKey exports D). These
// methods describe the CA by its certificate only and never touch Key.

// Format implements fmt.Formatter for every verb, %#v included.
func (ca CA) Format(f fmt.State, _ rune) {
	fmt.Fprint(f, ca.describe())
}

// LogValue implements slog.LogValuer.
func (ca CA) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("dir", ca.Dir)}
	if ca.Cert != nil {
		attrs = append(attrs,
			slog.String("subject", ca.Cert.Subject.CommonName),
			slog.String("not_after", ca.Cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	return slog.GroupValue(attrs...)
}

// MarshalJSON implements json.Marshaler.
func (ca CA) MarshalJSON() ([]byte, error) {
	v := struct {
		Dir      string `json:"dir"`
		Subject  string `json:"subject,omitempty"`
		NotAfter string `json:"not_after,omitempty"`
	}{Dir: ca.Dir}
	if ca.Cert != nil {
		v.Subject = ca.Cert.Subject.CommonName
		v.NotAfter = ca.Cert.NotAfter.UTC().Format(time.RFC3339)
	}
	return json.Marshal(v)
}

func (ca CA) describe() string {
	if ca.Cert == nil {
		return fmt.Sprintf("pki.CA{dir=%q}", ca.Dir)
	}
	return fmt.Sprintf("pki.CA{subject=%q, not_after=%s, dir=%q}",
		ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), ca.Dir)
}
