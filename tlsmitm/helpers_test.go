package tlsmitm

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// hangGuard bounds waits that only keep a broken test from hanging: a connection deadline on a
// peer that should answer, a wait for a goroutine that should end. It is never what a test
// asserts (CI runs these beside the end-to-end tests on two loaded cores), so it is minutes.
const hangGuard = 2 * time.Minute

// captureHello runs a crypto/tls client against one end of a pipe and returns the records it
// writes before it waits for the server: its ClientHello as it would appear on the wire.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	cc, sc := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(cc, cfg).Handshake() // fails once the pipe closes; only its first flight matters
	}()
	var out []byte
	hs := 0 // handshake payload bytes seen, to know when the hello is complete
	want := -1
	for want < 0 || hs < want {
		hdr := make([]byte, 5)
		if _, err := io.ReadFull(sc, hdr); err != nil {
			t.Fatalf("capture: %v", err)
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(sc, body); err != nil {
			t.Fatalf("capture: %v", err)
		}
		out = append(append(out, hdr...), body...)
		if want < 0 {
			want = 4 + (int(body[1])<<16 | int(body[2])<<8 | int(body[3]))
		}
		hs += len(body)
	}
	sc.Close()
	cc.Close()
	<-done
	return out
}

// unrecord strips the record headers from a sequence of handshake records.
func unrecord(t testing.TB, recs []byte) []byte {
	t.Helper()
	var msg []byte
	for len(recs) > 0 {
		if len(recs) < 5 {
			t.Fatal("unrecord: short header")
		}
		n := int(recs[3])<<8 | int(recs[4])
		if len(recs) < 5+n {
			t.Fatal("unrecord: short record")
		}
		msg = append(msg, recs[5:5+n]...)
		recs = recs[5+n:]
	}
	return msg
}

// rerecord splits a handshake message into handshake records of at most size payload bytes.
func rerecord(msg []byte, size int) []byte {
	return rerecordAs(msg, size, recordTypeHandshake, 0x0301)
}

func rerecordAs(msg []byte, size int, typ uint8, version uint16) []byte {
	var out []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		out = append(out, typ, byte(version>>8), byte(version), byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// record wraps payload in one record header, whatever its length.
func record(typ uint8, version uint16, payload []byte) []byte {
	n := len(payload)
	return append([]byte{typ, byte(version >> 8), byte(version), byte(n >> 8), byte(n)}, payload...)
}

type ext struct {
	typ  uint16
	data []byte
}

// helloSpec describes a ClientHello built by hand, for what crypto/tls clients never send.
type helloSpec struct {
	msgType     uint8 // 0 means client_hello
	version     uint16
	sessionID   []byte
	suites      []uint16
	rawSuites   []byte // used instead of suites when set, for malformed lists
	compression []byte
	noExts      bool
	exts        []ext
	trailing    []byte // appended inside the extensions block's parent, after it
}

func buildHello(s helloSpec) []byte {
	if s.msgType == 0 {
		s.msgType = typeClientHello
	}
	if s.version == 0 {
		s.version = 0x0303
	}
	var b cryptobyte.Builder
	b.AddUint8(s.msgType)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(s.version)
		b.AddBytes(make([]byte, 32))
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(s.sessionID) })
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			if s.rawSuites != nil {
				b.AddBytes(s.rawSuites)
				return
			}
			for _, cs := range s.suites {
				b.AddUint16(cs)
			}
		})
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(s.compression) })
		if !s.noExts {
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
				for _, e := range s.exts {
					b.AddUint16(e.typ)
					b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
				}
			})
		}
		b.AddBytes(s.trailing)
	})
	return b.BytesOrPanic()
}

// baseSpec is a plausible TLS 1.3 hello; tests change one thing about it.
func baseSpec(exts ...ext) helloSpec {
	return helloSpec{
		suites:      []uint16{0x1301, 0x1302, 0xc02f},
		compression: []byte{0},
		exts:        exts,
	}
}

func extSNI(names ...string) ext { return extSNITyped(0, names...) }

func extSNITyped(nameType uint8, names ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddUint8(nameType)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
		}
	})
	return ext{extServerName, b.BytesOrPanic()}
}

func extALPNOf(protos ...string) ext {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, p := range protos {
			b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(p)) })
		}
	})
	return ext{extALPN, b.BytesOrPanic()}
}

func extVersions(vs ...uint16) ext {
	var b cryptobyte.Builder
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, v := range vs {
			b.AddUint16(v)
		}
	})
	return ext{extSupportedVersions, b.BytesOrPanic()}
}

// extPadding is RFC 7685 padding, the way real clients grow a hello.
func extPadding(n int) ext { return ext{21, make([]byte, n)} }

// countingReader counts what Peek takes from the stream, to prove it never reads ahead.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
