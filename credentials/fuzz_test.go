package credentials

import (
	"strings"
	"testing"
	"time"
)

// FuzzTokenResponse: whatever the token endpoint answers, parse gives a token that is one header
// token, or an error that never shows the client's token or the secret; jwtExp never panics.
func FuzzTokenResponse(f *testing.F) {
	f.Add(200, []byte(`{"access_token":"abc","token_type":"Bearer","expires_in":60}`))
	f.Add(200, []byte(`{"access_token":"abc","token_type":"DPoP"}`))
	f.Add(200, []byte(`{"access_token":"a b","token_type":"bearer"}`))
	f.Add(200, []byte(`{"access_token":"abc","token_type":"N_A","expires_in":"3600"}`))
	f.Add(400, []byte(`{"error":"invalid_grant","error_description":"subject SUBJECT-TOKEN refused"}`))
	f.Add(401, []byte(`not json`))
	f.Add(200, []byte(`{"access_token":"eyJhbGciOiJub25lIn0.eyJleHAiOjE4MDAwMDAwMDB9.","token_type":"bearer"}`))
	e := NewExchanger(ExchangeConfig{Endpoint: "https://as.test/token"})
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		const subject, secret = "SUBJECT-TOKEN", "CLIENT-SECRET"
		tok, err := e.parse(status, body, subject, secret)
		if err != nil {
			if strings.Contains(err.Error(), subject) || strings.Contains(err.Error(), secret) {
				t.Fatalf("error shows a credential: %v", err)
			}
			return
		}
		if status != 200 || tok.value == "" || !validValue(tok.value) || strings.ContainsAny(tok.value, " \t") {
			t.Fatalf("status %d gave token %q", status, tok.value)
		}
		expiresAt(time.Unix(1_800_000_000, 0), tok.expiresIn, tok.value)
		jwtExp(string(body))
	})
}
