package tlsmitm

import (
	"fmt"

	"golang.org/x/crypto/cryptobyte"
)

// TLS constants this file needs; crypto/tls keeps its own unexported.
const (
	typeClientHello = 1

	extServerName        = 0
	extALPN              = 16
	extPreSharedKey      = 41
	extSupportedVersions = 43

	sniHostName = 0
	// maxSNILen bounds a host_name to a DNS name's length (253, plus a trailing dot and slack):
	// the SNI goes into routing and logs, and nothing longer is a hostname.
	maxSNILen = 255
)

// ClientHello holds what routing and logging need from a TLS ClientHello.
type ClientHello struct {
	SNI               string   // server_name host_name exactly as sent (case kept), "" if absent
	ALPN              []string // protocols in the client's order, nil if absent
	LegacyVersion     uint16   // client_version field (0x0303 for TLS 1.2 and 1.3 clients)
	SupportedVersions []uint16 // from supported_versions, nil if absent (a pre-TLS 1.3 client)
	CipherSuites      []uint16 // in the client's order, GREASE values included
}

// ParseClientHello parses a complete handshake message: type byte, 3-byte length and body.
// The message must be exactly that long. Errors are *Error of kind KindMalformed.
//
// The checks follow those crypto/tls applies to a ClientHello (RFC 8446 4.1.2 and 4.2, RFC 6066
// section 3, RFC 7301 section 3.1), so the SNI a route is chosen on is the SNI the TLS stack
// behind it sees. Two differences: a host_name must be printable ASCII of at most 255 bytes,
// because it is logged and matched on; and a trailing dot in it is accepted (crypto/tls refuses
// it, other stacks do not, and refusing it here would break passthrough to them).
func ParseClientHello(msg []byte) (*ClientHello, error) {
	s := cryptobyte.String(msg)
	var (
		typ  uint8
		body cryptobyte.String
	)
	if !s.ReadUint8(&typ) || !s.ReadUint24LengthPrefixed(&body) {
		return nil, malformed("short handshake header or body")
	}
	if typ != typeClientHello {
		return nil, malformed(fmt.Sprintf("handshake type %d, want client_hello (1)", typ))
	}
	if !s.Empty() {
		return nil, malformed(fmt.Sprintf("%d bytes after the handshake message", len(s)))
	}

	h := &ClientHello{}
	var sessionID, suites, compression cryptobyte.String
	if !body.ReadUint16(&h.LegacyVersion) || !body.Skip(32) { // random
		return nil, malformed("short client_version or random")
	}
	if !body.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 {
		return nil, malformed("bad legacy_session_id")
	}
	if !body.ReadUint16LengthPrefixed(&suites) || suites.Empty() || len(suites)%2 != 0 {
		return nil, malformed("bad cipher_suites")
	}
	h.CipherSuites = make([]uint16, 0, len(suites)/2)
	for !suites.Empty() {
		var cs uint16
		suites.ReadUint16(&cs)
		h.CipherSuites = append(h.CipherSuites, cs)
	}
	if !body.ReadUint8LengthPrefixed(&compression) || compression.Empty() {
		return nil, malformed("bad legacy_compression_methods")
	}
	if body.Empty() {
		// Before TLS 1.3 the extensions block is optional.
		return h, nil
	}
	var exts cryptobyte.String
	if !body.ReadUint16LengthPrefixed(&exts) || !body.Empty() {
		return nil, malformed("bad extensions block")
	}
	// One bit per extension type: duplicates are forbidden (RFC 8446 4.2) and a linear search
	// would make a hello of thousands of tiny extensions quadratic.
	var seen [1 << 16 / 64]uint64
	for !exts.Empty() {
		var (
			typ  uint16
			data cryptobyte.String
		)
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return nil, malformed("truncated extension")
		}
		if seen[typ/64]&(1<<(typ%64)) != 0 {
			return nil, malformed(fmt.Sprintf("duplicate extension %d", typ))
		}
		seen[typ/64] |= 1 << (typ % 64)
		if typ == extPreSharedKey && !exts.Empty() {
			return nil, malformed("pre_shared_key is not the last extension")
		}
		var err *Error
		switch typ {
		case extServerName:
			h.SNI, err = parseSNI(data)
		case extALPN:
			h.ALPN, err = parseALPN(data)
		case extSupportedVersions:
			h.SupportedVersions, err = parseSupportedVersions(data)
		}
		if err != nil {
			return nil, err
		}
	}
	return h, nil
}

func parseSNI(data cryptobyte.String) (string, *Error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || list.Empty() || !data.Empty() {
		return "", malformed("bad server_name list")
	}
	var host string
	for !list.Empty() {
		var (
			nameType uint8
			name     cryptobyte.String
		)
		if !list.ReadUint8(&nameType) || !list.ReadUint16LengthPrefixed(&name) || name.Empty() {
			return "", malformed("bad server_name entry")
		}
		if nameType != sniHostName {
			continue // unknown name types are skipped, as RFC 6066 allows for future types
		}
		if host != "" {
			return "", malformed("more than one host_name in server_name")
		}
		if len(name) > maxSNILen {
			return "", malformed(fmt.Sprintf("host_name is %d bytes long", len(name)))
		}
		for _, c := range name {
			if c <= 0x20 || c >= 0x7f {
				return "", malformed(fmt.Sprintf("host_name contains byte 0x%02x", c))
			}
		}
		host = string(name)
	}
	return host, nil
}

func parseALPN(data cryptobyte.String) ([]string, *Error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || list.Empty() || !data.Empty() {
		return nil, malformed("bad application_layer_protocol_negotiation list")
	}
	var protos []string
	for !list.Empty() {
		var p cryptobyte.String
		if !list.ReadUint8LengthPrefixed(&p) || p.Empty() {
			return nil, malformed("bad application_layer_protocol_negotiation entry")
		}
		protos = append(protos, string(p))
	}
	return protos, nil
}

func parseSupportedVersions(data cryptobyte.String) ([]uint16, *Error) {
	var list cryptobyte.String
	if !data.ReadUint8LengthPrefixed(&list) || list.Empty() || len(list)%2 != 0 || !data.Empty() {
		return nil, malformed("bad supported_versions list")
	}
	vs := make([]uint16, 0, len(list)/2)
	for !list.Empty() {
		var v uint16
		list.ReadUint16(&v)
		vs = append(vs, v)
	}
	return vs, nil
}
