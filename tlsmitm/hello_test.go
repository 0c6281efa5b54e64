package tlsmitm

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseClientHello(t *testing.T) {
	ok := func(exts ...ext) []byte { return buildHello(baseSpec(exts...)) }
	with := func(f func(*helloSpec)) []byte {
		s := baseSpec(extSNI("x.example"))
		f(&s)
		return buildHello(s)
	}
	// A psk extension body is opaque to the parser; its position is what matters.
	psk := ext{extPreSharedKey, []byte{0, 0}}
	for _, tc := range []struct {
		name      string
		msg       []byte
		wantErr   string // substring of the malformed message; "" means success
		wantSNI   string
		wantALPN  []string
		wantVers  []uint16
		wantSuite []uint16
	}{
		{name: "minimal tls13", msg: ok(extSNI("mcp.example.com"), extALPNOf("h2", "http/1.1"), extVersions(0x0304)), wantSNI: "mcp.example.com", wantALPN: []string{"h2", "http/1.1"}, wantVers: []uint16{0x0304}},
		{name: "no extensions block", msg: with(func(s *helloSpec) { s.noExts = true })},
		{name: "empty extensions block", msg: ok()},
		{name: "sni with trailing dot kept", msg: ok(extSNI("dot.example.")), wantSNI: "dot.example."},
		{name: "unknown sni name type skipped", msg: ok(extSNITyped(7, "whatever\x00")), wantSNI: ""},
		{name: "psk last", msg: ok(extSNI("a.example"), psk), wantSNI: "a.example"},
		{name: "grease suites kept", msg: with(func(s *helloSpec) { s.suites = []uint16{0x0a0a, 0x1301} }), wantSNI: "x.example", wantSuite: []uint16{0x0a0a, 0x1301}},
		{name: "255-byte sni", msg: ok(extSNI(strings.Repeat("a", 255))), wantSNI: strings.Repeat("a", 255)},

		{name: "empty", msg: nil, wantErr: "short handshake header"},
		{name: "header only", msg: []byte{1, 0, 0, 0}, wantErr: "short client_version"},
		{name: "length beyond message", msg: []byte{1, 0, 1, 0, 3, 3}, wantErr: "short handshake header or body"},
		{name: "bytes after message", msg: append(ok(), 0), wantErr: "1 bytes after"},
		{name: "server hello type", msg: with(func(s *helloSpec) { s.msgType = 2 }), wantErr: "handshake type 2"},
		{name: "session id too long", msg: with(func(s *helloSpec) { s.sessionID = make([]byte, 33) }), wantErr: "legacy_session_id"},
		{name: "no cipher suites", msg: with(func(s *helloSpec) { s.suites = nil }), wantErr: "cipher_suites"},
		{name: "odd cipher suites", msg: with(func(s *helloSpec) { s.rawSuites = []byte{0x13, 0x01, 0x13} }), wantErr: "cipher_suites"},
		{name: "no compression", msg: with(func(s *helloSpec) { s.compression = nil }), wantErr: "compression"},
		{name: "bytes after extensions", msg: with(func(s *helloSpec) { s.trailing = []byte{0} }), wantErr: "extensions block"},
		{name: "truncated extension", msg: with(func(s *helloSpec) { s.noExts = true; s.trailing = []byte{0, 3, 0, 0, 0} }), wantErr: "truncated extension"},
		{name: "duplicate extension", msg: ok(extALPNOf("h2"), extALPNOf("h2")), wantErr: "duplicate extension 16"},
		{name: "duplicate unknown extension", msg: ok(ext{0xfe0d, nil}, ext{0xfe0d, nil}), wantErr: "duplicate extension 65037"},
		{name: "psk not last", msg: ok(psk, extSNI("a.example")), wantErr: "pre_shared_key"},
		{name: "two host_names", msg: ok(extSNI("a.example", "b.example")), wantErr: "more than one host_name"},
		{name: "empty host_name", msg: ok(extSNI("")), wantErr: "server_name entry"},
		{name: "empty server_name list", msg: ok(ext{extServerName, []byte{0, 0}}), wantErr: "server_name list"},
		{name: "server_name bytes after list", msg: ok(ext{extServerName, []byte{0, 4, 0, 0, 1, 'a', 0}}), wantErr: "server_name list"},
		{name: "host_name with nul", msg: ok(extSNI("a\x00b")), wantErr: "byte 0x00"},
		{name: "host_name with newline", msg: ok(extSNI("a\nb")), wantErr: "byte 0x0a"},
		{name: "host_name with space", msg: ok(extSNI("a b")), wantErr: "byte 0x20"},
		{name: "host_name utf-8", msg: ok(extSNI("bücher.example")), wantErr: "byte 0xc3"},
		{name: "host_name too long", msg: ok(extSNI(strings.Repeat("a", 256))), wantErr: "256 bytes"},
		{name: "empty alpn list", msg: ok(ext{extALPN, []byte{0, 0}}), wantErr: "negotiation list"},
		{name: "empty alpn protocol", msg: ok(extALPNOf("h2", "")), wantErr: "negotiation entry"},
		{name: "alpn length beyond extension", msg: ok(ext{extALPN, []byte{0, 5, 2, 'h', '2'}}), wantErr: "negotiation list"},
		{name: "empty supported_versions", msg: ok(ext{extSupportedVersions, []byte{0}}), wantErr: "supported_versions"},
		{name: "odd supported_versions", msg: ok(ext{extSupportedVersions, []byte{3, 3, 4, 3}}), wantErr: "supported_versions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseClientHello(tc.msg)
			if tc.wantErr != "" {
				var pe *Error
				if !errors.As(err, &pe) || pe.Kind != KindMalformed || !strings.Contains(pe.Msg, tc.wantErr) {
					t.Fatalf("err = %v, want malformed mentioning %q", err, tc.wantErr)
				}
				if h != nil {
					t.Error("hello returned with an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.SNI != tc.wantSNI || !slices.Equal(h.ALPN, tc.wantALPN) || !slices.Equal(h.SupportedVersions, tc.wantVers) {
				t.Errorf("hello = %+v", h)
			}
			if tc.wantSuite != nil && !slices.Equal(h.CipherSuites, tc.wantSuite) {
				t.Errorf("CipherSuites = %#04x, want %#04x", h.CipherSuites, tc.wantSuite)
			}
			if tc.wantALPN == nil && h.ALPN != nil || tc.wantVers == nil && h.SupportedVersions != nil {
				t.Errorf("absent extension reported as empty, not nil: %+v", h)
			}
		})
	}
}

// The parse must not keep pointers into the caller's buffer: Peek's buffer is handed on and
// replayed, and a caller may reuse it.
func TestParseClientHelloCopies(t *testing.T) {
	msg := buildHello(baseSpec(extSNI("copy.example"), extALPNOf("h2")))
	h, err := ParseClientHello(msg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msg {
		msg[i] = 'X'
	}
	if h.SNI != "copy.example" || h.ALPN[0] != "h2" || h.CipherSuites[0] != 0x1301 {
		t.Errorf("hello changed with its input: %+v", h)
	}
}
