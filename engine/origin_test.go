package engine

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"
)

// originFunc plays a mechanism that knows more than the destination.
type originFunc func(c *net.TCPConn) (Origin, error)

func (f originFunc) Origin(c *net.TCPConn) (Origin, error) { return f(c) }

// TestOriginReachesTheRecord: what the mechanism knows about a connection (its name, the process,
// the name the client resolved) is what the flow record says, for an opaque flow.
func TestOriginReachesTheRecord(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c); c.Close() })
	dst := netip.MustParseAddrPort(up)
	id := &Identity{PID: 42, UID: 1000, GID: 1000, Comm: "agent", CgroupID: 7, Exe: "/usr/bin/agent"}
	tests := []struct {
		name      string
		origin    Origin
		err       error
		mechanism string
		sni       string
		reason    string
		process   bool
	}{
		{name: "destination only: the engine's mechanism", origin: Origin{Dst: dst}, mechanism: "external"},
		{name: "the origin names its mechanism", origin: Origin{Dst: dst, Mechanism: "nftables-tproxy"}, mechanism: "nftables-tproxy"},
		{name: "eBPF identity", origin: Origin{Dst: dst, Mechanism: "ebpf", Identity: id}, mechanism: "ebpf", process: true},
		{name: "DNS host shown where a flow without SNI has its name", origin: Origin{Dst: dst, Mechanism: "dns", Host: "tools.example"},
			mechanism: "dns", sni: "tools.example"},
		{name: "no origin: refused", err: errors.New("no record"), mechanism: "external", reason: "no_original_destination"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, up, Limits{IdleTimeout: time.Minute}, nil, func(o *Options) {
				o.Steering = originFunc(func(*net.TCPConn) (Origin, error) { return tc.origin, tc.err })
			})
			// A refused flow is reset, which may reach the client before its connect returns.
			if c, err := net.Dial("tcp", h.addr); err == nil {
				c.Write([]byte("hello"))
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c)
				c.Close()
			} else if tc.err == nil {
				t.Fatal(err)
			}
			rec := h.sink.next(t)
			if rec.Mechanism != tc.mechanism || rec.SNI != tc.sni || rec.Reason != tc.reason {
				t.Fatalf("record mechanism %q sni %q reason %q, want %q %q %q", rec.Mechanism, rec.SNI, rec.Reason, tc.mechanism, tc.sni, tc.reason)
			}
			if tc.err == nil && rec.OrigDst != up {
				t.Errorf("orig_dst %q, want %q", rec.OrigDst, up)
			}
			if got := rec.Process != nil; got != tc.process {
				t.Fatalf("process %+v, want present %v", rec.Process, tc.process)
			}
			if tc.process && (rec.Process.PID != id.PID || rec.Process.Comm != id.Comm || rec.Process.Cgroup != id.CgroupID || rec.Process.Exe != id.Exe) {
				t.Errorf("process %+v, want %+v", rec.Process, id)
			}
		})
	}
}
