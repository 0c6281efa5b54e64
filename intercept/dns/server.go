// Package dns is the dns mechanism's name service: a DNS server that answers the intercepted
// names with virtual IPs (VIPs) and forwards every other query, the VIP table (stable, persisted,
// quarantined, bounded by quotas), and the forwarder and cache through which the name behind a
// VIP is resolved when the appliance dials. It installs no steering.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mcpintercept/origin"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Outcomes of a query, for metrics and tests.
const (
	outcomeVIP       = "vip"
	outcomeNoData    = "nodata"
	outcomeForwarded = "forwarded"
	outcomeServFail  = "servfail"
	outcomeRefused   = "refused"
	outcomeExhausted = "exhausted"
	outcomeQuota     = "quota"
	outcomeMalformed = "malformed"
	outcomeFlood     = "flood"
)

// NamePatterns are the intercepted names: exact names and "*.suffix" wildcards (one label or
// more in front of suffix), compared case-insensitively without a trailing dot.
type NamePatterns struct {
	exact    map[string]bool
	suffixes []string // ".suffix"
}

// NewNamePatterns compiles patterns.
func NewNamePatterns(patterns []string) *NamePatterns {
	p := &NamePatterns{exact: map[string]bool{}}
	for _, s := range patterns {
		s = CanonicalName(s)
		if rest, ok := strings.CutPrefix(s, "*."); ok {
			p.suffixes = append(p.suffixes, "."+rest)
			continue
		}
		p.exact[s] = true
	}
	return p
}

// Match reports whether name (canonical) is intercepted.
func (p *NamePatterns) Match(name string) bool { return p.Pattern(name) != "" }

// Pattern is the pattern that intercepts name (canonical): name itself when it is listed
// exactly, else the first "*.suffix" wildcard that matches; "" when none does. A VIP is
// charged to this pattern's quota.
func (p *NamePatterns) Pattern(name string) string {
	if p.exact[name] {
		return name
	}
	for _, s := range p.suffixes {
		if len(name) > len(s) && strings.HasSuffix(name, s) {
			return "*" + s
		}
	}
	return ""
}

// ServerOptions configure a Server.
type ServerOptions struct {
	Names    []string
	Table    *VIPTable
	Upstream Upstream // usually a *Cache over a Forwarder
	Clients  []netip.Prefix
	TTL      time.Duration
	// ClientRate and ClientBurst bound one client's queries (token bucket); the excess is
	// dropped unanswered.
	ClientRate  float64
	ClientBurst int
	Timeout     time.Duration // bound on answering one query (upstream included)
	Metrics     *Metrics
	Log         *slog.Logger
	Now         func() time.Time
}

// Server answers queries on UDP and TCP: intercepted names get VIPs, every other query goes
// to the upstream resolvers unchanged. It is never an open resolver (clients outside Clients are
// REFUSED) and never answers what it cannot parse (malformed queries are dropped and counted,
// since any reply to garbage can be used to amplify).
type Server struct {
	opt     ServerOptions
	names   *NamePatterns
	log     *slog.Logger
	limiter *clientLimiter
	quotaLg rateLog // over-quota refusals
	noVIPLg rateLog // exhausted pools and journal failures

	mu      sync.Mutex
	servers []*mdns.Server
}

// NewServer builds a server; Listen binds it.
func NewServer(opt ServerOptions) *Server {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 4 * time.Second
	}
	if opt.TTL <= 0 {
		opt.TTL = 30 * time.Second
	}
	return &Server{opt: opt, names: NewNamePatterns(opt.Names), log: opt.Log,
		limiter: newClientLimiter(opt.ClientRate, opt.ClientBurst, opt.Now),
		quotaLg: rateLog{log: opt.Log, every: time.Second, now: opt.Now},
		noVIPLg: rateLog{log: opt.Log, every: time.Second, now: opt.Now}}
}

// Listen binds UDP and TCP on every address, so that a port in use fails before anything is
// installed. Serve starts answering.
func (s *Server) Listen(addrs []netip.AddrPort) error {
	for _, a := range addrs {
		pc, l, err := listenUDPTCP(a)
		if err != nil {
			s.Close()
			return err
		}
		s.mu.Lock()
		s.servers = append(s.servers,
			&mdns.Server{PacketConn: pc, Handler: s, DecorateReader: s.reader, MsgAcceptFunc: acceptQuery,
				UDPSize: mdns.DefaultMsgSize},
			&mdns.Server{Listener: l, Handler: s, DecorateReader: s.reader, MsgAcceptFunc: acceptQuery,
				ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }, MaxTCPQueries: 1000})
		s.mu.Unlock()
	}
	return nil
}

// listenUDPTCP binds UDP and TCP on the same address and port; port 0 picks one free for both.
func listenUDPTCP(a netip.AddrPort) (net.PacketConn, net.Listener, error) {
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", a.String())
		if err != nil {
			return nil, nil, fmt.Errorf("dns: listen udp %s: %w", a, err)
		}
		at := a
		if a.Port() == 0 {
			at = netip.AddrPortFrom(a.Addr(), uint16(pc.LocalAddr().(*net.UDPAddr).Port))
		}
		l, err := net.Listen("tcp", at.String())
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if a.Port() != 0 || attempt == 20 {
			return nil, nil, fmt.Errorf("dns: listen tcp %s: %w", at, err)
		}
	}
}

// Addrs are the bound addresses (UDP and TCP share each).
func (s *Server) Addrs() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []netip.AddrPort
	for _, srv := range s.servers {
		if srv.PacketConn != nil {
			if ap, err := netip.ParseAddrPort(srv.PacketConn.LocalAddr().String()); err == nil {
				out = append(out, ap)
			}
		}
	}
	return out
}

// Serve answers on every bound socket until Close.
func (s *Server) Serve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func(srv *mdns.Server) {
			if err := srv.ActivateAndServe(); err != nil {
				s.log.Error("dns server stopped", "err", err)
			}
		}(srv)
		<-started
	}
}

// Close stops answering and closes the sockets.
func (s *Server) Close() error {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := srv.ShutdownContext(ctx); err != nil {
			// Never started: close the sockets ourselves.
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
			if srv.Listener != nil {
				srv.Listener.Close()
			}
		}
		cancel()
	}
	return nil
}

// acceptQuery accepts everything the reader let through: the reader already dropped (and
// counted) what is not a plain query, where miekg/dns's default would answer some with FORMERR.
func acceptQuery(dh mdns.Header) mdns.MsgAcceptAction {
	return mdns.MsgAccept
}

// reader drops, before a goroutine is spent on it, a message that is malformed or from a client
// over its rate. Dropping happens here because miekg/dns answers an unparsable body with FORMERR.
func (s *Server) reader(r mdns.Reader) mdns.Reader { return &dnsReader{s: s, r: r} }

type dnsReader struct {
	s *Server
	r mdns.Reader
}

func (d *dnsReader) ReadUDP(conn *net.UDPConn, timeout time.Duration) ([]byte, *mdns.SessionUDP, error) {
	for {
		b, sess, err := d.r.ReadUDP(conn, timeout)
		if err != nil {
			return b, sess, err
		}
		var from netip.Addr
		if ua, ok := sess.RemoteAddr().(*net.UDPAddr); ok {
			from = ua.AddrPort().Addr().Unmap()
		}
		if d.s.admit(from, b) {
			return b, sess, nil
		}
	}
}

func (d *dnsReader) ReadTCP(conn net.Conn, timeout time.Duration) ([]byte, error) {
	b, err := d.r.ReadTCP(conn, timeout)
	if err != nil {
		return b, err
	}
	var from netip.Addr
	if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		from = ta.AddrPort().Addr().Unmap()
	}
	if !d.s.admit(from, b) {
		return nil, errors.New("dns: dropped") // closes the connection
	}
	return b, nil
}

// admit applies the flood bound and the malformed-query check to one raw message.
func (s *Server) admit(from netip.Addr, raw []byte) bool {
	q, ok := ParseQuery(raw)
	if !ok {
		s.opt.Metrics.query(0, outcomeMalformed)
		return false
	}
	if !s.limiter.allow(from) {
		s.opt.Metrics.query(q.Question[0].Qtype, outcomeFlood)
		return false
	}
	return true
}

// ParseQuery accepts exactly what the server answers: a well-formed standard query (QR clear,
// opcode QUERY) with one question and no answer or authority records, and at most an OPT record
// in the additional section.
func ParseQuery(raw []byte) (*mdns.Msg, bool) {
	if len(raw) < 12 || len(raw) > mdns.MaxMsgSize {
		return nil, false
	}
	m := new(mdns.Msg)
	if err := m.Unpack(raw); err != nil {
		return nil, false
	}
	if m.Response || m.Opcode != mdns.OpcodeQuery || len(m.Question) != 1 || len(m.Answer) != 0 || len(m.Ns) != 0 {
		return nil, false
	}
	opts := 0
	for _, rr := range m.Extra {
		if rr.Header().Rrtype != mdns.TypeOPT {
			return nil, false
		}
		opts++
	}
	if opts > 1 {
		return nil, false
	}
	if _, ok := mdns.IsDomainName(m.Question[0].Name); !ok {
		return nil, false
	}
	return m, true
}

// ServeDNS implements mdns.Handler.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	var client netip.AddrPort
	udp := false
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		client, udp = a.AddrPort(), true
	case *net.TCPAddr:
		client = a.AddrPort()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Timeout)
	defer cancel()
	resp := s.Answer(ctx, client, req)
	if resp == nil {
		return
	}
	if udp {
		resp.Truncate(udpSize(req))
	}
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("dns: write answer", "client", client.String(), "err", err)
	}
}

// udpSize is the largest UDP answer the client accepts (RFC 6891: at least 512).
func udpSize(req *mdns.Msg) int {
	if o := req.IsEdns0(); o != nil {
		return max(int(o.UDPSize()), mdns.MinMsgSize)
	}
	return mdns.MinMsgSize
}

// Answer is the answer to one parsed query from client, nil to drop it. It is what ServeDNS
// writes (before truncation to the client's UDP size), exported for tests and the fuzz target.
func (s *Server) Answer(ctx context.Context, client netip.AddrPort, req *mdns.Msg) *mdns.Msg {
	if len(req.Question) != 1 || req.Response || req.Opcode != mdns.OpcodeQuery {
		s.opt.Metrics.query(0, outcomeMalformed)
		return nil
	}
	q := req.Question[0]
	if !origin.InPrefixes(s.opt.Clients, client.Addr()) {
		s.opt.Metrics.query(q.Qtype, outcomeRefused)
		return s.reply(req, mdns.RcodeRefused)
	}
	name := CanonicalName(q.Name)
	if pattern := s.names.Pattern(name); q.Qclass == mdns.ClassINET && pattern != "" {
		switch q.Qtype {
		case mdns.TypeA, mdns.TypeAAAA:
			return s.vip(req, name, q.Qtype == mdns.TypeAAAA, Claim{Client: clientKey(client.Addr()), Pattern: pattern})
		case mdns.TypeHTTPS, mdns.TypeSVCB, mdns.TypeANY:
			// Their address hints and ECH configurations would take the client around the VIP.
			s.opt.Metrics.query(q.Qtype, outcomeNoData)
			return s.nodata(req, name)
		}
	}
	r, err := s.opt.Upstream.Exchange(ctx, req)
	if err != nil {
		s.log.Debug("dns: upstream", "name", q.Name, "err", err)
		s.opt.Metrics.query(q.Qtype, outcomeServFail)
		return s.reply(req, mdns.RcodeServerFailure)
	}
	s.opt.Metrics.query(q.Qtype, outcomeForwarded)
	return r
}

// vip answers an intercepted name's A or AAAA: its VIP, or NODATA when there is no pool of that
// family (never NXDOMAIN: the name exists, and NXDOMAIN for AAAA makes clients drop the A too).
func (s *Server) vip(req *mdns.Msg, name string, v6 bool, c Claim) *mdns.Msg {
	qt := req.Question[0].Qtype
	vip, fresh, err := s.opt.Table.LookupFor(name, v6, c)
	var qe *QuotaError
	if errors.As(err, &qe) {
		return s.overQuota(req, name, qe)
	}
	if err != nil {
		outcome := outcomeServFail
		if errors.Is(err, ErrPoolExhausted) {
			outcome = outcomeExhausted
		}
		s.opt.Metrics.query(qt, outcome)
		s.noVIPLg.warn("dns: no VIP for an intercepted name", "name", name, "client", c.Client, "err", err)
		return s.reply(req, mdns.RcodeServerFailure)
	}
	if !vip.IsValid() {
		s.opt.Metrics.query(qt, outcomeNoData)
		return s.nodata(req, name)
	}
	if fresh {
		if s.opt.Metrics != nil {
			s.opt.Metrics.VIPsBound.Inc()
		}
		s.log.Info("dns: bound a VIP", "name", name, "vip", vip.String())
	}
	m := s.reply(req, mdns.RcodeSuccess)
	m.Authoritative = true
	hdr := mdns.RR_Header{Name: req.Question[0].Name, Rrtype: qt, Class: mdns.ClassINET, Ttl: s.ttl()}
	if v6 {
		m.Answer = []mdns.RR{&mdns.AAAA{Hdr: hdr, AAAA: vip.AsSlice()}}
	} else {
		m.Answer = []mdns.RR{&mdns.A{Hdr: hdr, A: vip.AsSlice()}}
	}
	s.opt.Metrics.query(qt, outcomeVIP)
	return m
}

// overQuota answers a query for a new name whose client or pattern holds its quota: REFUSED
// for this query only (the client's other names keep their VIPs, and a stub resolver moves on
// at once instead of retrying a SERVFAIL), with an Extended DNS Error "Prohibited" (RFC 8914)
// saying why when the query speaks EDNS.
func (s *Server) overQuota(req *mdns.Msg, name string, qe *QuotaError) *mdns.Msg {
	s.opt.Metrics.query(req.Question[0].Qtype, outcomeQuota)
	if s.opt.Metrics != nil {
		s.opt.Metrics.QuotaRefused.WithLabelValues(qe.Scope).Inc()
	}
	s.quotaLg.warn("dns: VIP quota exceeded, query refused", "scope", qe.Scope, "client", qe.Client,
		"pattern", qe.Pattern, "quota", qe.Limit, "name", name)
	m := s.reply(req, mdns.RcodeRefused)
	if o := m.IsEdns0(); o != nil {
		o.Option = append(o.Option, &mdns.EDNS0_EDE{InfoCode: mdns.ExtendedErrorCodeProhibited,
			ExtraText: "mcpintercept: VIP quota of this " + qe.Scope + " reached"})
	}
	return m
}

// clientKey is who a client is for the quota: its address, IPv6 per /64 (one host can take
// a whole /64), as the flood limiter counts it.
func clientKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func (s *Server) ttl() uint32 { return uint32(s.opt.TTL / time.Second) }

// nodata is NOERROR with no answer and a SOA (owner: the name itself) whose MINIMUM is the VIP
// TTL, so the negative answer is cached as long as a positive one (RFC 2308).
func (s *Server) nodata(req *mdns.Msg, name string) *mdns.Msg {
	m := s.reply(req, mdns.RcodeSuccess)
	m.Authoritative = true
	ttl := s.ttl()
	m.Ns = []mdns.RR{&mdns.SOA{
		Hdr: mdns.RR_Header{Name: mdns.Fqdn(name), Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: ttl},
		Ns:  "mcpintercept.invalid.", Mbox: "hostmaster.mcpintercept.invalid.",
		Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: ttl,
	}}
	return m
}

// reply is an empty answer to req: same id and question (case kept), RD copied, RA set, and an
// OPT record when the query had one (RFC 6891), DO echoed.
func (s *Server) reply(req *mdns.Msg, rcode int) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetRcode(req, rcode)
	m.RecursionAvailable = true
	if o := req.IsEdns0(); o != nil {
		m.SetEdns0(mdns.DefaultMsgSize, o.Do())
	}
	return m
}

// clientLimiter is a token bucket per client address (IPv6 per /64, so one host cannot spread
// over its addresses). The table is bounded: when it is full it is cleared, which at worst lets
// a client start again with a full bucket.
type clientLimiter struct {
	rate  float64
	burst float64
	now   func() time.Time
	mu    sync.Mutex
	b     map[netip.Addr]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

const maxLimiterClients = 65536

func newClientLimiter(rate float64, burst int, now func() time.Time) *clientLimiter {
	return &clientLimiter{rate: rate, burst: float64(burst), now: now, b: map[netip.Addr]*bucket{}}
}

func (l *clientLimiter) allow(a netip.Addr) bool {
	if l.rate <= 0 || l.burst <= 0 {
		return true
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[a]
	if b == nil {
		if len(l.b) >= maxLimiterClients {
			clear(l.b)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.b[a] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
