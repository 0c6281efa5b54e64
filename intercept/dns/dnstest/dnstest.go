// Package dnstest is a real DNS resolver on loopback for tests: a small zone (rebind.test and
// meta.test resolve into the deny list, nx.test does not exist, big.test's TXT is truncated over
// UDP), every query recorded.
package dnstest

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	dns "github.com/miekg/dns"
)

// Upstream is a real resolver on loopback (UDP and TCP): it serves a small zone, records
// what it received, and truncates big.test over UDP so that the client must retry over TCP.
type Upstream struct {
	Addr netip.AddrPort
	// N counts the queries received; TTL is the answers' TTL (60 s unless a test changes it).
	N   atomic.Int64
	TTL uint32

	mu  sync.Mutex
	got []*dns.Msg // queries as received
	net []string
}

// StartUpstream starts one on 127.0.0.1 (a free port, UDP and TCP), stopped when the test ends.
// StartUpstream starts one on 127.0.0.1 (a free port, UDP and TCP), stopped when the test ends.
func StartUpstream(t testing.TB) *Upstream {
	t.Helper()
	u := &Upstream{TTL: 60}
	pc, l, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	u.Addr = netip.MustParseAddrPort(pc.LocalAddr().String())
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: l, Handler: u}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return u
}

func (u *Upstream) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	u.N.Add(1)
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	u.mu.Lock()
	u.got = append(u.got, q.Copy())
	u.net = append(u.net, network)
	u.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(q)
	qq := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qq.Name, "."))
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: qq.Name, Rrtype: t, Class: dns.ClassINET, Ttl: u.TTL}
	}
	switch {
	case name == "nx.test":
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300}, Ns: "ns.test.", Mbox: "h.test.", Minttl: 30}}
	case name == "big.test" && qq.Qtype == dns.TypeTXT:
		for i := 0; i < 40; i++ {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{strings.Repeat(fmt.Sprint(i%10), 200)}})
		}
		if network == "udp" {
			m.Truncate(dns.MinMsgSize)
		}
	case qq.Qtype == dns.TypeA:
		ip := "10.1.2.3"
		switch name {
		case "rebind.test":
			ip = "127.0.0.1"
		case "meta.test":
			ip = "169.254.169.254"
		}
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(ip).To4()}}
	case qq.Qtype == dns.TypeAAAA && name != "meta.test" && name != "rebind.test":
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP("fd00:1::3")}}
	}
	if o := q.IsEdns0(); o != nil {
		m.SetEdns0(4096, o.Do())
	}
	w.WriteMsg(m)
}

// Last is the last query received and the network it came over (udp, tcp).
func (u *Upstream) Last() (*dns.Msg, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[len(u.got)-1], u.net[len(u.net)-1]
}

// Queries are the queries received, in order.
func (u *Upstream) Queries() []*dns.Msg {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*dns.Msg(nil), u.got...)
}

// listenLoopback binds UDP and TCP on one free loopback port.
func listenLoopback() (net.PacketConn, net.Listener, error) {
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if attempt == 20 {
			return nil, nil, err
		}
	}
}
