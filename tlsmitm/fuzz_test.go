package tlsmitm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"testing/iotest"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite the committed fuzz seed corpora under testdata/fuzz")

// checkErr enforces the error contract every Peek and ParseClientHello result must meet.
func checkErr(t *testing.T, h *ClientHello, err error) *Error {
	t.Helper()
	if (err == nil) == (h == nil) {
		t.Fatalf("hello %v with error %v", h, err)
	}
	if err == nil {
		return nil
	}
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	switch pe.Kind {
	case KindNotTLS, KindTruncated, KindOversized, KindMalformed, KindRead:
	default:
		t.Fatalf("unknown kind %q", pe.Kind)
	}
	return pe
}

func checkSNI(t *testing.T, h *ClientHello) {
	t.Helper()
	if len(h.SNI) > maxSNILen {
		t.Fatalf("SNI of %d bytes", len(h.SNI))
	}
	for i := 0; i < len(h.SNI); i++ {
		if c := h.SNI[i]; c <= 0x20 || c >= 0x7f {
			t.Fatalf("SNI %q has byte 0x%02x", h.SNI, c)
		}
	}
}

func FuzzPeek(f *testing.F) {
	for _, s := range peekSeeds(f) {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, got, err := Peek(bytes.NewReader(data), 0)
		pe := checkErr(t, h, err)
		if !bytes.HasPrefix(data, got) {
			t.Fatal("returned bytes are not a prefix of the input")
		}
		if len(got) > DefaultMaxHello {
			t.Fatalf("read %d bytes past the default limit", len(got))
		}
		if h != nil {
			checkSNI(t, h)
		}
		// Delivery must not matter: one byte per Read gives the same answer and the same bytes.
		h1, got1, err1 := Peek(iotest.OneByteReader(bytes.NewReader(data)), 0)
		pe1 := checkErr(t, h1, err1)
		if !reflect.DeepEqual(h, h1) || !bytes.Equal(got, got1) || (pe == nil) != (pe1 == nil) || pe != nil && *pe != *pe1 {
			t.Fatalf("one-byte reads differ: %v %d bytes, %v; bulk: %v %d bytes, %v", h1, len(got1), err1, h, len(got), err)
		}
		// Peek needs every byte it returned, so a limit one smaller must refuse a hello it
		// accepted (only the one-byte not-TLS decision needs nothing more than its byte).
		if h != nil {
			_, _, err := Peek(bytes.NewReader(data), len(got)-1)
			var small *Error
			if !errors.As(err, &small) || small.Kind != KindOversized {
				t.Fatalf("limit %d below the %d bytes used: %v", len(got)-1, len(got), err)
			}
		}
	})
}

func FuzzParseClientHello(f *testing.F) {
	for _, s := range parseSeeds(f) {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := ParseClientHello(msg)
		pe := checkErr(t, h, err)
		if pe != nil && pe.Kind != KindMalformed {
			t.Fatalf("parse error of kind %s", pe.Kind)
		}
		if h != nil {
			checkSNI(t, h)
			if len(h.CipherSuites) == 0 {
				t.Fatal("accepted a hello without cipher suites")
			}
		}
		// Peek over the same message, recorded two ways, must agree with the parse whenever
		// the message is framed as one handshake message Peek could assemble.
		if len(msg) < 4 || msg[0] != typeClientHello || len(msg) != 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) || len(msg) > 40<<10 {
			return
		}
		for _, size := range []int{1 << 14, 7} {
			wire := rerecord(msg, size)
			if len(wire) > DefaultMaxHello {
				continue
			}
			ph, got, perr := Peek(bytes.NewReader(wire), 0)
			if !bytes.Equal(got, wire) {
				t.Fatalf("records of %d: Peek read %d of %d bytes", size, len(got), len(wire))
			}
			if !reflect.DeepEqual(ph, h) || (perr == nil) != (err == nil) || err != nil && *checkErr(t, ph, perr) != *pe {
				t.Fatalf("records of %d: Peek %v, %v; ParseClientHello %v, %v", size, ph, perr, h, err)
			}
		}
	})
}

type seed struct {
	name string
	data []byte
}

// peekSeeds are wire inputs: real hellos as sent and re-recorded, and the ways a stream goes
// wrong. The same list is committed under testdata/fuzz/FuzzPeek.
func peekSeeds(tb testing.TB) []seed {
	caps := captures(tb)
	t13 := caps["tls13 sni alpn"]
	msg13 := unrecord(tb, t13)
	big := buildHello(baseSpec(extSNI("big.example.com"), extALPNOf("h2"), extPadding(17000)))
	s := []seed{
		{"tls13-sni-alpn", t13},
		{"tls13-no-sni", caps["tls13 no sni alpn"]},
		{"tls12-sni-alpn", caps["tls12 sni alpn"]},
		{"tls12-no-sni", caps["tls12 no sni"]},
		{"tls13-records-100", rerecord(msg13, 100)},
		{"tls12-records-1", rerecord(unrecord(tb, caps["tls12 no sni"]), 1)},
		{"padded-two-records", rerecord(big, 1<<14)},
		{"truncated", t13[:len(t13)/2]},
		{"http-get", []byte("GET /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n")},
		{"garbage", []byte("\x9c\x01\xff\x00\x16\x03\x01garbage")},
		{"sslv2-version", []byte{0x16, 0x02, 0x00, 0x00, 0x04, 1, 0, 0, 0}},
		{"alert-interleaved", append(rerecord(msg13[:100], 100), record(21, 0x0303, []byte{2, 40})...)},
		{"server-hello-type", rerecord(append([]byte{2}, msg13[1:]...), 1<<14)},
		{"declared-length-huge", record(22, 0x0301, []byte{1, 0xff, 0xff, 0xff, 3, 3})},
		{"empty-record", record(22, 0x0301, nil)},
	}
	return s
}

// parseSeeds are handshake messages for ParseClientHello; committed under
// testdata/fuzz/FuzzParseClientHello.
func parseSeeds(tb testing.TB) []seed {
	caps := captures(tb)
	return []seed{
		{"tls13-sni-alpn", unrecord(tb, caps["tls13 sni alpn"])},
		{"tls13-no-sni", unrecord(tb, caps["tls13 no sni alpn"])},
		{"tls12-sni-alpn", unrecord(tb, caps["tls12 sni alpn"])},
		{"tls12-no-sni", unrecord(tb, caps["tls12 no sni"])},
		{"minimal", buildHello(baseSpec(extSNI("a.example"), extALPNOf("h2"), extVersions(0x0304)))},
		{"no-extensions", buildHello(helloSpec{suites: []uint16{0x002f}, compression: []byte{0}, noExts: true})},
		{"duplicate-extension", buildHello(baseSpec(extALPNOf("h2"), extALPNOf("h2")))},
		{"psk-not-last", buildHello(baseSpec(ext{extPreSharedKey, []byte{0, 0}}, extSNI("a.example")))},
		{"two-host-names", buildHello(baseSpec(extSNI("a.example", "b.example")))},
		{"sni-control-byte", buildHello(baseSpec(extSNI("a\x01b")))},
		{"odd-suites", buildHello(helloSpec{rawSuites: []byte{0x13, 0x01, 0x13}, compression: []byte{0}})},
		{"truncated", unrecord(tb, caps["tls12 sni alpn"])[:60]},
	}
}

// TestWriteFuzzSeeds regenerates the committed corpora: go test ./tlsmitm -run TestWriteFuzzSeeds -write-seeds
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz")
	}
	for fuzz, seeds := range map[string][]seed{"FuzzPeek": peekSeeds(t), "FuzzParseClientHello": parseSeeds(t)} {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
			if err := os.WriteFile(filepath.Join(dir, "seed-"+s.name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
