package engine

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkRoundTrip1KiB: 1 KiB request, 1 KiB response on one connection, directly and through
// the engine (splice relay) on loopback. The ratio of the two is the relay's cost per round trip.
func BenchmarkRoundTrip1KiB(b *testing.B) {
	up := upstreamServerB(b)
	for _, mode := range []string{"direct", "engine"} {
		b.Run(mode, func(b *testing.B) {
			addr := up
			if mode == "engine" {
				h := newHarness(b, up, Limits{IdleTimeout: time.Minute})
				addr = h.addr
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 1024)
			buf := make([]byte, 1024)
			b.SetBytes(2048)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func upstreamServerB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}
