package engine

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"mcpintercept/origin"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// flow is one accepted connection on its way through the pipeline.
type flow struct {
	e      *Engine
	num    uint64 // the flow's number, for admit and release
	id     string
	start  time.Time
	client netip.AddrPort
	orig   netip.AddrPort // origin.Dst
	origin Origin
	c      *net.TCPConn
	fc     *flowConns
	// src is the listener's own source (ServeWith); nil: the engine's steering and dialer.
	src *Source
	// up is the upstream connection once dialled (the TLS session over it when one was
	// originated); the flow's exit closes it with the client.
	up net.Conn
	// dispatched: the flow got past admission and its origin, and went through dispatch.
	dispatched bool

	// rules is the route's rule set, fixed when the route is chosen.
	rules flowRules
	// route is the chosen route's name ("" for none: the transparent core), for spans.
	route string

	peekDone bool
	isHello  bool   // the client opened with a complete, valid ClientHello
	sniName  string // the hello's server name, kept for records and rules after hello is released
	// peeked and hello are what the peek read and parsed. They are released (set to nil) once
	// handed on, so that an idle flow does not hold a ClientHello (up to 64 KiB) for its life.
	peeked  []byte
	hello   *tlsmitm.ClientHello
	peekErr error
}

// steering gives the flow's Origin: its listener's source, or the engine's mechanism.
func (f *flow) steering() OriginSource {
	if f.src != nil {
		return f.src.Steering
	}
	return f.e.opt.Steering
}

// dialer dials the flow's upstream: from its listener's source (a pod's network namespace), or
// the engine's dialer.
func (f *flow) dialer() Dialer {
	if f.src != nil {
		return f.src.Dialer
	}
	return f.e.opt.Dialer
}

// dialContext is ctx for one of f's upstream dials: with the client's address when its source's
// dialer connects from it (Source.DialFromClient), ctx itself otherwise (no allocation).
func (f *flow) dialContext(ctx context.Context) context.Context {
	if f.src != nil && f.src.DialFromClient {
		return origin.WithSource(ctx, f.client)
	}
	return ctx
}

// takePeeked hands the peeked bytes over to whoever replays them and forgets them.
func (f *flow) takePeeked() []byte {
	b := f.peeked
	f.peeked, f.hello = nil, nil
	return b
}

// peek reads the client's first bytes once: a whole ClientHello when it is TLS, otherwise only
// what it took to tell (usually one byte). A client that sends nothing within the peek timeout
// (a server-speaks-first protocol) counts as not TLS.
func (f *flow) peek() {
	if f.peekDone {
		return
	}
	f.peekDone = true
	to := f.e.opt.TLS.PeekTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	f.c.SetReadDeadline(time.Now().Add(to))
	f.hello, f.peeked, f.peekErr = tlsmitm.Peek(f.c, f.e.opt.TLS.MaxClientHello)
	f.c.SetReadDeadline(time.Time{})
	if f.hello != nil {
		f.isHello, f.sniName = true, f.hello.SNI
	}
}

func (f *flow) sni() string {
	f.peek()
	return f.sniName
}

// isTLS reports whether the client opened with a complete, valid ClientHello.
func (f *flow) isTLS() bool { f.peek(); return f.isHello }

// badHello is a client that started a TLS handshake the parser refused (malformed, oversized,
// truncated): the flow is closed and nothing is forwarded.
func (f *flow) badHello() bool {
	var te *tlsmitm.Error
	if !errors.As(f.peekErr, &te) {
		return false
	}
	switch te.Kind {
	case tlsmitm.KindMalformed, tlsmitm.KindOversized:
		return true
	case tlsmitm.KindTruncated, tlsmitm.KindRead:
		// The client hung up, or stalled past the peek timeout, halfway through a hello. Forwarding
		// it opaque would let a client skip the route's inspection by pausing: close instead.
		return len(f.peeked) > 0
	}
	return false
}

// silent reports that the client sent nothing before the peek timeout (as opposed to closing).
func (f *flow) silent() bool {
	return len(f.peeked) == 0 && errors.Is(f.peekErr, os.ErrDeadlineExceeded)
}

func (f *flow) record() telemetry.FlowRecord {
	r := telemetry.FlowRecord{
		Time: telemetry.Time{Time: f.start}, Flow: f.id, Client: f.client.String(),
		Mechanism: f.origin.Mechanism,
	}
	if f.orig.IsValid() {
		r.OrigDst = f.orig.String()
	}
	r.SNI = f.sniName
	if r.SNI == "" {
		// The record has no host field: a flow without SNI shows the name the client resolved
		// (DNS interception) there; with SNI the two are equal, as the DNS mechanism requires.
		r.SNI = f.origin.Host
	}
	if id := f.origin.Identity; id != nil {
		r.Process = &telemetry.Process{PID: id.PID, UID: id.UID, GID: id.GID,
			Comm: id.Comm, Exe: id.Exe, Cgroup: id.CgroupID}
	}
	if p := f.origin.Pod; p != nil {
		r.Pod = &telemetry.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ServiceAccount: p.ServiceAccount}
	}
	if f.src != nil {
		r.Mode = f.src.Mode
	}
	return r
}

// clientVars is policy's `client` variable for f, built once per connection and shared by
// every evaluation on it (policy only reads it).
func (f *flow) clientVars() *policy.Client {
	c := &policy.Client{Address: f.client.Addr().String(), Port: f.client.Port()}
	if id := f.origin.Identity; id != nil {
		c.Process = &policy.Process{PID: id.PID, UID: id.UID, GID: id.GID, Comm: id.Comm, Exe: id.Exe, Cgroup: id.CgroupID}
	}
	if f.src != nil {
		c.Pod = f.src.Pod
	}
	if p := f.origin.Pod; c.Pod == nil && p != nil {
		// An inbound (Sidecar) flow: the client pod the steering found by its address.
		c.Pod = &policy.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ServiceAccount: p.ServiceAccount, Labels: p.Labels}
	}
	return c
}

// connVars is policy's `conn` variable for f under disposition d.
func (f *flow) connVars(d Disposition) *policy.Conn {
	mech := f.origin.Mechanism // the listener's own steering (nftables-inbound for a Sidecar flow)
	if mech == "" {
		mech = f.e.opt.Mechanism
	}
	return &policy.Conn{OrigDst: f.orig.String(), OrigIP: f.orig.Addr().String(), OrigPort: f.orig.Port(),
		Mechanism: mech, TLS: string(d), Hello: f.isHello, SNI: f.sniName}
}

// seenTLS names what the bytes read so far were, for the record of a flow that is refused or
// forwarded untouched: plaintext when they were not TLS, else passthrough in the draft's terms
// (encrypted or not, nothing was decrypted).
func (f *flow) seenTLS() Disposition {
	if f.peekDone && !f.isHello && len(f.peeked) > 0 {
		return Plaintext
	}
	return Passthrough
}

// httpMethods are the request-line prefixes that make a plaintext stream HTTP/1.x for Auto.
// CONNECT and TRACE are listed so that they reach Level 1, which refuses a protocol switch the
// route does not allow, instead of being forwarded opaque.
var httpMethods = []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// looksLikeHTTP reads a few more bytes (at most 8, within the peek timeout) and checks for an
// HTTP request line. What it reads joins f.peeked, so nothing is lost.
func (f *flow) looksLikeHTTP() bool {
	if len(f.peeked) == 0 {
		return false
	}
	to := f.e.opt.TLS.PeekTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	f.c.SetReadDeadline(time.Now().Add(to))
	defer f.c.SetReadDeadline(time.Time{})
	buf := make([]byte, 8)
	for len(f.peeked) < 8 && !strings.Contains(string(f.peeked), " ") {
		n, err := f.c.Read(buf[:8-len(f.peeked)])
		f.peeked = append(f.peeked, buf[:n]...)
		if err != nil {
			break
		}
	}
	s := string(f.peeked)
	for _, m := range httpMethods {
		if strings.HasPrefix(s, m) {
			return true
		}
	}
	return false
}
