package tlsmitm

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

var alpn = []string{"h2", "http/1.1"}

type realHello struct {
	name     string
	cfg      *tls.Config
	wantSNI  string
	wantALPN []string
	want13   bool // supported_versions offers TLS 1.3
}

var realHelloCases = []realHello{
	{"tls13 sni alpn", &tls.Config{ServerName: "mcp.example.com", NextProtos: alpn, MinVersion: tls.VersionTLS13}, "mcp.example.com", alpn, true},
	{"tls13 no sni alpn", &tls.Config{InsecureSkipVerify: true, NextProtos: alpn, MinVersion: tls.VersionTLS13}, "", alpn, true},
	{"tls12 sni alpn", &tls.Config{ServerName: "mcp.example.com", NextProtos: alpn, MaxVersion: tls.VersionTLS12}, "mcp.example.com", alpn, false},
	{"tls12 no sni", &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}, "", nil, false},
	{"default versions sni", &tls.Config{ServerName: "Tools.Example.ORG"}, "Tools.Example.ORG", nil, true},
	{"ip server name sends no sni", &tls.Config{ServerName: "10.200.2.2", NextProtos: alpn}, "", alpn, true},
}

var (
	capturedOnce sync.Once
	captured     map[string][]byte
)

// captures returns the wire bytes of every realHelloCases client, captured once per run.
func captures(t testing.TB) map[string][]byte {
	t.Helper()
	capturedOnce.Do(func() {
		captured = map[string][]byte{}
		for _, c := range realHelloCases {
			captured[c.name] = captureHello(t, c.cfg)
		}
	})
	return captured
}

// checkHello compares a parsed hello with what the generating client configured.
func checkHello(t *testing.T, got *ClientHello, want realHello) {
	t.Helper()
	if got == nil {
		t.Fatal("nil hello")
	}
	if got.SNI != want.wantSNI {
		t.Errorf("SNI = %q, want %q", got.SNI, want.wantSNI)
	}
	if !slices.Equal(got.ALPN, want.wantALPN) {
		t.Errorf("ALPN = %q, want %q", got.ALPN, want.wantALPN)
	}
	if got.LegacyVersion != tls.VersionTLS12 {
		t.Errorf("LegacyVersion = %#04x, want 0x0303", got.LegacyVersion)
	}
	if has := slices.Contains(got.SupportedVersions, tls.VersionTLS13); has != want.want13 {
		t.Errorf("SupportedVersions = %#04x, TLS 1.3 offered %v, want %v", got.SupportedVersions, has, want.want13)
	}
	if !slices.Contains(got.SupportedVersions, tls.VersionTLS12) && !want.want13 {
		t.Errorf("SupportedVersions = %#04x, want TLS 1.2 in it", got.SupportedVersions)
	}
	if len(got.CipherSuites) == 0 {
		t.Error("no cipher suites")
	}
}

// TestPeekRealHellos runs every captured hello through Peek as it arrived, one byte per Read,
// and re-split into small records; each time Peek must return the same hello and exactly the
// bytes it read, no more.
func TestPeekRealHellos(t *testing.T) {
	caps := captures(t)
	type delivery struct {
		name    string
		reframe func([]byte) []byte
		reader  func(io.Reader) io.Reader
	}
	same := func(b []byte) []byte { return b }
	plain := func(r io.Reader) io.Reader { return r }
	deliveries := []delivery{
		{"as sent", same, plain},
		{"one byte per read", same, iotest.OneByteReader},
		{"half reads", same, iotest.HalfReader},
		{"data with EOF", same, iotest.DataErrReader},
		{"100-byte records", func(b []byte) []byte { return rerecord(unrecord(t, b), 100) }, plain},
		{"100-byte records one byte per read", func(b []byte) []byte { return rerecord(unrecord(t, b), 100) }, iotest.OneByteReader},
		{"1-byte records", func(b []byte) []byte { return rerecord(unrecord(t, b), 1) }, plain},
		{"3-byte records splitting the handshake header", func(b []byte) []byte { return rerecord(unrecord(t, b), 3) }, iotest.HalfReader},
	}
	for _, c := range realHelloCases {
		for _, d := range deliveries {
			t.Run(c.name+"/"+d.name, func(t *testing.T) {
				wire := d.reframe(caps[c.name])
				// Bytes after the hello stand for the client's next flight; Peek must leave them.
				stream := append(slices.Clone(wire), []byte("\x14\x03\x03\x00\x01\x01NEXT")...)
				// Count at Peek's side of the delivery reader: some of them buffer ahead themselves.
				cr := &countingReader{r: d.reader(bytes.NewReader(stream))}
				h, got, err := Peek(cr, 0)
				if err != nil {
					t.Fatalf("Peek: %v", err)
				}
				checkHello(t, h, c)
				if !bytes.Equal(got, wire) {
					t.Fatalf("returned %d bytes, want the %d bytes of the hello's records", len(got), len(wire))
				}
				if cr.n != len(got) {
					t.Fatalf("read %d bytes from the stream but returned %d", cr.n, len(got))
				}
				if rest, _ := io.ReadAll(cr); !bytes.Equal(rest, stream[len(wire):]) {
					t.Fatalf("the bytes after the hello were disturbed: %q", rest)
				}
			})
		}
	}
}

// TestParseMatchesCryptoTLS feeds each captured hello to a crypto/tls server and checks that
// ParseClientHello sees the same SNI, ALPN, versions and suites that crypto/tls reports.
func TestParseMatchesCryptoTLS(t *testing.T) {
	for name, wire := range captures(t) {
		t.Run(name, func(t *testing.T) {
			got, err := ParseClientHello(unrecord(t, wire))
			if err != nil {
				t.Fatal(err)
			}
			info := serverView(t, wire)
			if got.SNI != info.ServerName {
				t.Errorf("SNI %q, crypto/tls %q", got.SNI, info.ServerName)
			}
			if !slices.Equal(got.ALPN, info.SupportedProtos) {
				t.Errorf("ALPN %q, crypto/tls %q", got.ALPN, info.SupportedProtos)
			}
			if !slices.Equal(got.SupportedVersions, info.SupportedVersions) {
				t.Errorf("SupportedVersions %#04x, crypto/tls %#04x", got.SupportedVersions, info.SupportedVersions)
			}
			if !slices.Equal(got.CipherSuites, info.CipherSuites) {
				t.Errorf("CipherSuites %#04x, crypto/tls %#04x", got.CipherSuites, info.CipherSuites)
			}
		})
	}
}

// serverView returns what a crypto/tls server learns from wire.
func serverView(t *testing.T, wire []byte) *tls.ClientHelloInfo {
	t.Helper()
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	go func() {
		cc.Write(wire)
		io.Copy(io.Discard, cc) // the server's alert
	}()
	infos := make(chan *tls.ClientHelloInfo, 1)
	srv := tls.Server(sc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			infos <- h
			return nil, errors.New("seen enough")
		},
	})
	srv.SetDeadline(time.Now().Add(hangGuard))
	srv.Handshake()
	select {
	case h := <-infos:
		return h
	default:
		t.Fatal("crypto/tls did not accept the hello")
		return nil
	}
}

func TestPeekHandBuilt(t *testing.T) {
	// 20 KiB of padding: larger than one record, so the client must use two.
	big := buildHello(baseSpec(extSNI("big.example.com"), extALPNOf(alpn...), extVersions(0x0304, 0x0303), extPadding(20<<10)))
	small := buildHello(baseSpec(extSNI("small.example.com"), extALPNOf("h2")))
	trailing := record(22, 0x0301, append(slices.Clone(small), 0x0f, 0, 0, 0)) // a stray handshake header after the hello
	ancient := buildHello(helloSpec{version: 0x0301, suites: []uint16{0x002f}, compression: []byte{0}, noExts: true})
	for _, tc := range []struct {
		name     string
		wire     []byte
		max      int
		wantSNI  string
		wantALPN []string
		wantVers []uint16
	}{
		{name: "20 KiB hello in two records", wire: rerecord(big, 1<<14), wantSNI: "big.example.com", wantALPN: alpn, wantVers: []uint16{0x0304, 0x0303}},
		{name: "20 KiB hello in 1000-byte records", wire: rerecord(big, 1000), wantSNI: "big.example.com", wantALPN: alpn, wantVers: []uint16{0x0304, 0x0303}},
		{name: "20 KiB hello with a tight limit", wire: rerecord(big, 1<<14), max: len(big) + 10, wantSNI: "big.example.com", wantALPN: alpn, wantVers: []uint16{0x0304, 0x0303}},
		{name: "trailing handshake bytes in the last record", wire: trailing, wantSNI: "small.example.com", wantALPN: []string{"h2"}},
		{name: "no extensions block", wire: rerecord(ancient, 1<<14)},
		{name: "record version 0x0300", wire: rerecordAs(small, 1<<14, 22, 0x0300), wantSNI: "small.example.com", wantALPN: []string{"h2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
				cr := &countingReader{r: io.MultiReader(bytes.NewReader(tc.wire), strings.NewReader("after"))}
				h, got, err := Peek(wrap(cr), tc.max)
				if err != nil {
					t.Fatal(err)
				}
				if h.SNI != tc.wantSNI || !slices.Equal(h.ALPN, tc.wantALPN) || !slices.Equal(h.SupportedVersions, tc.wantVers) {
					t.Errorf("hello = %+v", h)
				}
				if !bytes.Equal(got, tc.wire) || cr.n != len(got) {
					t.Errorf("returned %d bytes, read %d, want %d", len(got), cr.n, len(tc.wire))
				}
			}
		})
	}
}

func TestPeekErrors(t *testing.T) {
	hello := unrecord(t, captures(t)["tls13 sni alpn"])
	wire := rerecord(hello, 1<<14)
	big := buildHello(baseSpec(extSNI("big.example.com"), extPadding(20<<10)))
	junk := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	junk[0] = 0x9c
	tlsJunk := append([]byte{0x16, 0x03, 0x01, 0x02, 0x00}, junk[:512]...)
	hugeDecl := record(22, 0x0301, []byte{1, 0xff, 0xff, 0xff, 3, 3})
	readErr := errors.New("connection reset by peer")
	const all = -1

	for _, tc := range []struct {
		name     string
		wire     []byte
		reader   func([]byte) io.Reader // nil: a bytes.Reader
		max      int
		wantKind string
		wantIs   error
		wantRead int // bytes Peek must have consumed and returned; all means len(wire)
		wantMsg  string
	}{
		{name: "http request", wire: []byte("GET / HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n"), wantKind: KindNotTLS, wantIs: ErrNotTLS, wantRead: 1, wantMsg: "0x47"},
		{name: "http post", wire: []byte("POST /mcp HTTP/1.1\r\n"), wantKind: KindNotTLS, wantIs: ErrNotTLS, wantRead: 1},
		{name: "garbage", wire: junk, wantKind: KindNotTLS, wantIs: ErrNotTLS, wantRead: 1},
		{name: "sslv2-style version", wire: []byte{0x16, 0x02, 0x00, 0x00, 0x10, 1, 2, 3}, wantKind: KindNotTLS, wantIs: ErrNotTLS, wantRead: 5},
		{name: "garbage after a tls header", wire: tlsJunk, wantKind: KindMalformed, wantRead: 5 + 512},
		{name: "empty connection", wire: nil, wantKind: KindTruncated, wantIs: io.EOF, wantRead: 0},
		{name: "one byte", wire: []byte{0x16}, wantKind: KindTruncated, wantIs: io.ErrUnexpectedEOF, wantRead: 1},
		{name: "truncated header", wire: wire[:3], wantKind: KindTruncated, wantIs: io.ErrUnexpectedEOF, wantRead: 3},
		{name: "truncated body", wire: wire[:len(wire)-1], wantKind: KindTruncated, wantIs: io.ErrUnexpectedEOF, wantRead: len(wire) - 1},
		{name: "truncated between records", wire: rerecord(hello, 100)[:105], wantKind: KindTruncated, wantRead: 105},
		{name: "truncated one byte per read", wire: wire[:len(wire)/2], reader: func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }, wantKind: KindTruncated, wantRead: len(wire) / 2},
		{name: "oversized at the limit minus one", wire: wire, max: len(wire) - 1, wantKind: KindOversized, wantRead: 5},
		{name: "oversized split hello", wire: rerecord(hello, 100), max: 300, wantKind: KindOversized, wantRead: 105},
		{name: "oversized big hello stops after one record", wire: rerecord(big, 1<<14), max: 1<<14 + 5 + 100, wantKind: KindOversized, wantRead: 1<<14 + 5},
		{name: "oversized declared length", wire: hugeDecl, wantKind: KindOversized, wantRead: len(hugeDecl)},
		{name: "oversized tiny limit", wire: wire, max: 3, wantKind: KindOversized, wantRead: 1},
		{name: "record too long", wire: record(22, 0x0301, big), wantKind: KindMalformed, wantRead: 5, wantMsg: "record length"},
		{name: "alert interleaved", wire: append(rerecord(hello[:100], 100), record(21, 0x0303, []byte{2, 40})...), wantKind: KindMalformed, wantRead: 110, wantMsg: "content type 21"},
		{name: "application data interleaved", wire: append(rerecord(hello[:100], 100), record(23, 0x0303, hello[100:])...), wantKind: KindMalformed, wantRead: 110},
		{name: "bad version in a later record", wire: append(rerecord(hello[:100], 100), rerecordAs(hello[100:], 1<<14, 22, 0x0201)...), wantKind: KindMalformed, wantRead: 110},
		{name: "empty record", wire: record(22, 0x0301, nil), wantKind: KindMalformed, wantRead: 5},
		{name: "server hello", wire: rerecord(append([]byte{2}, hello[1:]...), 1<<14), wantKind: KindMalformed, wantRead: all, wantMsg: "handshake type 2"},
		{name: "wrong handshake type decided on one byte", wire: rerecord(append([]byte{11}, hello[1:]...), 1), wantKind: KindMalformed, wantRead: 6},
		{name: "bad hello body", wire: rerecord(buildHello(baseSpec(extSNI("a", "b"))), 1<<14), wantKind: KindMalformed, wantRead: all, wantMsg: "host_name"},
		{name: "read error mid-hello", wire: wire[:200], reader: func(b []byte) io.Reader {
			return io.MultiReader(bytes.NewReader(b), iotest.ErrReader(readErr))
		}, wantKind: KindRead, wantIs: readErr, wantRead: 200},
		{name: "timeout", wire: wire, reader: func(b []byte) io.Reader { return iotest.TimeoutReader(bytes.NewReader(b)) }, wantKind: KindRead, wantIs: iotest.ErrTimeout, wantRead: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src io.Reader = bytes.NewReader(tc.wire)
			if tc.reader != nil {
				src = tc.reader(tc.wire)
			}
			cr := &countingReader{r: src}
			h, got, err := Peek(cr, tc.max)
			if err == nil {
				t.Fatalf("Peek succeeded: %+v", h)
			}
			if h != nil {
				t.Error("hello returned with an error")
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Kind != tc.wantKind {
				t.Fatalf("err = %v, want kind %s", err, tc.wantKind)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want it to wrap %v", err, tc.wantIs)
			}
			if !strings.HasPrefix(err.Error(), "tls client hello: "+tc.wantKind+": ") || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("message %q", err)
			}
			wantRead := tc.wantRead
			if wantRead == all {
				wantRead = len(tc.wire)
			}
			if cr.n != len(got) {
				t.Errorf("read %d bytes but returned %d", cr.n, len(got))
			}
			if len(got) != wantRead {
				t.Errorf("returned %d bytes, want %d", len(got), wantRead)
			}
			if !bytes.Equal(got, tc.wire[:len(got)]) {
				t.Error("returned bytes differ from the stream")
			}
			if eff := tc.max; eff > 0 && len(got) > eff {
				t.Errorf("read %d bytes past the limit %d", len(got), eff)
			}
		})
	}
}

// A default limit that a real hello fits in, and a big one does not exceed unnoticed.
func TestPeekDefaultLimit(t *testing.T) {
	// The extensions block tops out at 64 KiB, so the rest of the excess trails it.
	spec := baseSpec(extPadding(60000))
	spec.trailing = make([]byte, 10000)
	huge := buildHello(spec)
	_, got, err := Peek(bytes.NewReader(rerecord(huge, 1<<14)), 0)
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != KindOversized {
		t.Fatalf("err = %v, want oversized", err)
	}
	if len(got) > DefaultMaxHello {
		t.Errorf("read %d bytes, limit %d", len(got), DefaultMaxHello)
	}
}

func BenchmarkPeek(b *testing.B) {
	wire := captureHello(b, realHelloCases[0].cfg)
	r := bytes.NewReader(wire)
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(wire)
		if _, _, err := Peek(r, 0); err != nil {
			b.Fatal(err)
		}
	}
}
