// Command dnsupstream is the lab's DNS peer (github.com/miekg/dns), for the dns mechanism's
// end-to-end test.
//
// serve is the upstream resolver in mcpi-server: it answers the lab zone on UDP and TCP and
// prints one line per query ("Q udp|tcp NAME TYPE") so a test can see what reached it:
//
//	mcp.lab.test, *.mcp.lab.test   A 10.200.2.2, AAAA fd00:200:2::2
//	plain.lab.test                 A 10.200.2.2
//	rebind.lab.test                A 127.0.0.1
//	meta.lab.test                  A 169.254.169.254
//	big.lab.test                   TXT: 40 records of 200 bytes (truncated over UDP)
//	anything else under lab.test   NXDOMAIN
//
// query sends one query and prints one JSON line (rcode, answers, truncated, authority types):
//
//	dnsupstream serve -listen 10.200.2.2:53,[fd00:200:2::2]:53 [-ttl 60]
//	dnsupstream query -server 10.200.1.1:53 -name mcp.lab.test -type A [-tcp] [-edns 0]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dnsupstream serve|query ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "query":
		query(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: dnsupstream serve|query ...")
		os.Exit(2)
	}
}

type zone struct{ ttl uint32 }

func (z zone) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if len(q.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	qq := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(qq.Name, "."))
	fmt.Printf("Q %s %s %s\n", network, name, dns.TypeToString[qq.Qtype])
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: qq.Name, Rrtype: t, Class: dns.ClassINET, Ttl: z.ttl}
	}
	a := func(ip string) { m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(ip).To4()}) }
	aaaa := func(ip string) { m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP(ip)}) }
	known := true
	switch {
	case name == "mcp.lab.test" || strings.HasSuffix(name, ".mcp.lab.test"):
		switch qq.Qtype {
		case dns.TypeA:
			a("10.200.2.2")
		case dns.TypeAAAA:
			aaaa("fd00:200:2::2")
		}
	case name == "plain.lab.test":
		if qq.Qtype == dns.TypeA {
			a("10.200.2.2")
		}
	case name == "rebind.lab.test":
		if qq.Qtype == dns.TypeA {
			a("127.0.0.1")
		}
	case name == "meta.lab.test":
		if qq.Qtype == dns.TypeA {
			a("169.254.169.254")
		}
	case name == "big.lab.test":
		if qq.Qtype == dns.TypeTXT {
			for i := 0; i < 40; i++ {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{strings.Repeat(fmt.Sprint(i%10), 200)}})
			}
		}
	default:
		known = false
	}
	if !known {
		m.Rcode = dns.RcodeNameError
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "lab.test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: z.ttl},
			Ns: "ns.lab.test.", Mbox: "hostmaster.lab.test.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: z.ttl}}
	}
	size := dns.MinMsgSize
	if o := q.IsEdns0(); o != nil {
		size = max(int(o.UDPSize()), dns.MinMsgSize)
		m.SetEdns0(4096, o.Do())
	}
	if network == "udp" {
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "10.200.2.2:53", "comma-separated addresses (UDP and TCP)")
	ttl := fs.Uint("ttl", 60, "TTL of every answer")
	fs.Parse(args)
	z := zone{ttl: uint32(*ttl)}
	var servers []*dns.Server
	for _, a := range strings.Split(*listen, ",") {
		for _, network := range []string{"udp", "tcp"} {
			s := &dns.Server{Addr: a, Net: network, Handler: z}
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			errc := make(chan error, 1)
			go func() { errc <- s.ListenAndServe() }()
			select {
			case <-started:
			case err := <-errc:
				fmt.Fprintf(os.Stderr, "dnsupstream: %s %s: %v\n", network, a, err)
				os.Exit(1)
			}
			servers = append(servers, s)
		}
	}
	fmt.Println("READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	for _, s := range servers {
		s.Shutdown()
	}
}

type result struct {
	Rcode     string   `json:"rcode"`
	Truncated bool     `json:"truncated"`
	Answers   []string `json:"answers"`
	Authority []string `json:"authority"`
	Error     string   `json:"error,omitempty"`
}

func query(args []string) {
	fs := flag.NewFlagSet("query", flag.ExitOnError)
	server := fs.String("server", "10.200.1.1:53", "resolver address")
	name := fs.String("name", "", "query name")
	typ := fs.String("type", "A", "query type")
	tcp := fs.Bool("tcp", false, "query over TCP")
	edns := fs.Int("edns", 0, "EDNS0 UDP size (0: no EDNS0)")
	fs.Parse(args)
	t, ok := dns.StringToType[strings.ToUpper(*typ)]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown type", *typ)
		os.Exit(2)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(*name), t)
	if *edns > 0 {
		q.SetEdns0(uint16(*edns), false)
	}
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	if *tcp {
		c.Net = "tcp"
	}
	r, _, err := c.Exchange(q, *server)
	var out result
	if err != nil && r == nil {
		out.Error = err.Error()
	} else {
		out.Rcode, out.Truncated = dns.RcodeToString[r.Rcode], r.Truncated
		out.Answers, out.Authority = []string{}, []string{}
		for _, rr := range r.Answer {
			switch v := rr.(type) {
			case *dns.A:
				out.Answers = append(out.Answers, "A "+v.A.String())
			case *dns.AAAA:
				out.Answers = append(out.Answers, "AAAA "+v.AAAA.String())
			default:
				out.Answers = append(out.Answers, dns.TypeToString[rr.Header().Rrtype])
			}
		}
		for _, rr := range r.Ns {
			out.Authority = append(out.Authority, dns.TypeToString[rr.Header().Rrtype])
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
