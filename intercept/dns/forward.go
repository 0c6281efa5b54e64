package dns

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// maxCacheTTL caps how long an upstream answer is served from the cache, whatever its TTL.
const maxCacheTTL = time.Hour

// Upstream sends one query to the upstream resolvers and returns their answer (Forwarder in
// production; tests substitute their own).
type Upstream interface {
	Exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error)
}

// Forwarder sends queries to the upstream resolvers in order: over UDP first, and again over
// TCP when the UDP answer is truncated. Each exchange gets a fresh random id (the client's id
// is not trusted to be unpredictable), restored by the caller.
type Forwarder struct {
	Servers []netip.AddrPort
	Timeout time.Duration
	// Dialer carries the bypass mark; nil dials plainly.
	Dialer *net.Dialer
}

// Exchange implements Upstream. q is not modified.
func (f *Forwarder) Exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error) {
	if len(f.Servers) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	out := q.Copy()
	out.Id = mdns.Id()
	var errs []string
	for _, s := range f.Servers {
		r, err := f.exchange(ctx, out, s)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("upstream resolvers: %s", strings.Join(errs, "; "))
}

func (f *Forwarder) exchange(ctx context.Context, q *mdns.Msg, server netip.AddrPort) (*mdns.Msg, error) {
	to := f.Timeout
	if to <= 0 {
		to = 2 * time.Second
	}
	addr := server.String()
	for _, network := range []string{"udp", "tcp"} {
		c := &mdns.Client{Net: network, Timeout: to, Dialer: f.Dialer}
		if c.Dialer != nil {
			d := *f.Dialer
			d.Timeout = to
			c.Dialer = &d
		}
		if network == "udp" {
			// Room for the largest answer the client's EDNS0 size allows.
			c.UDPSize = mdns.MinMsgSize
			if o := q.IsEdns0(); o != nil {
				c.UDPSize = max(o.UDPSize(), mdns.MinMsgSize)
			}
		}
		r, _, err := c.ExchangeContext(ctx, q, addr)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", network, addr, err)
		}
		if r.Id != q.Id || len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, q.Question[0].Name) ||
			r.Question[0].Qtype != q.Question[0].Qtype || r.Question[0].Qclass != q.Question[0].Qclass {
			return nil, fmt.Errorf("%s %s: answer does not match the question", network, addr)
		}
		if r.Truncated && network == "udp" {
			continue // the whole answer over TCP
		}
		return r, nil
	}
	return nil, fmt.Errorf("tcp %s: truncated", addr)
}

// Cache is a TTL-respecting answer cache in front of an Upstream, bounded by entries (least
// recently used goes first). Answers are keyed by name (case-insensitive), type, class and the
// EDNS0 bits that change an answer (DO, CD, EDNS0 present); a hit is served with the TTLs
// decreased by its age. Negative answers are kept as long as their SOA says (RFC 2308); SERVFAIL,
// REFUSED and truncated answers are not kept.
type Cache struct {
	Upstream Upstream
	Size     int
	Now      func() time.Time
	// OnHit and OnMiss count (nil: not counted).
	OnHit, OnMiss func()

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	items map[string]*list.Element
	// inflight joins identical concurrent misses into one upstream exchange.
	inflight map[string]*flight
}

type cacheEntry struct {
	key     string
	msg     *mdns.Msg
	stored  time.Time
	expires time.Time
}

type flight struct {
	done chan struct{}
	msg  *mdns.Msg
	err  error
}

func cacheKey(q *mdns.Msg) string {
	qq := q.Question[0]
	var b strings.Builder
	b.WriteString(CanonicalName(qq.Name))
	fmt.Fprintf(&b, "|%d|%d|cd=%v", qq.Qtype, qq.Qclass, q.CheckingDisabled)
	if o := q.IsEdns0(); o != nil {
		fmt.Fprintf(&b, "|edns|do=%v", o.Do())
	}
	return b.String()
}

// Exchange answers q from the cache or the upstream. The answer carries q's id and q's question
// exactly as the client spelled it (0x20 case included); the upstream saw the same question.
func (c *Cache) Exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error) {
	now := c.now()
	key := cacheKey(q)
	c.mu.Lock()
	c.init()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*cacheEntry)
		if now.Before(e.expires) {
			c.lru.MoveToFront(el)
			m := e.msg.Copy()
			c.mu.Unlock()
			if c.OnHit != nil {
				c.OnHit()
			}
			ageTTLs(m, uint32(now.Sub(e.stored)/time.Second))
			return answerFor(q, m), nil
		}
		c.lru.Remove(el)
		delete(c.items, key)
	}
	if fl, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err != nil {
			return nil, fl.err
		}
		return answerFor(q, fl.msg.Copy()), nil
	}
	fl := &flight{done: make(chan struct{})}
	c.inflight[key] = fl
	c.mu.Unlock()
	if c.OnMiss != nil {
		c.OnMiss()
	}

	r, err := c.Upstream.Exchange(ctx, q)
	fl.msg, fl.err = r, err
	c.mu.Lock()
	delete(c.inflight, key)
	if err == nil {
		if ttl, ok := cacheTTL(r); ok {
			c.storeLocked(key, r.Copy(), now, ttl)
		}
	}
	c.mu.Unlock()
	close(fl.done)
	if err != nil {
		return nil, err
	}
	return answerFor(q, r.Copy()), nil
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) init() {
	if c.items == nil {
		c.items = map[string]*list.Element{}
		c.lru = list.New()
		c.inflight = map[string]*flight{}
	}
}

func (c *Cache) storeLocked(key string, m *mdns.Msg, now time.Time, ttl time.Duration) {
	size := c.Size
	if size <= 0 {
		size = 10000
	}
	for c.lru.Len() >= size {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.items, old.Value.(*cacheEntry).key)
	}
	c.items[key] = c.lru.PushFront(&cacheEntry{key: key, msg: m, stored: now, expires: now.Add(ttl)})
}

// Len is the number of cached answers.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	return c.lru.Len()
}

// answerFor makes r the answer to q: q's id and question (as the client spelled it).
func answerFor(q, r *mdns.Msg) *mdns.Msg {
	r.Id = q.Id
	r.Question = []mdns.Question{q.Question[0]}
	return r
}

// cacheTTL is how long r may be cached: the smallest TTL of its records (the OPT pseudo-record
// aside), or for a negative answer the SOA's min(TTL, MINIMUM); false when it must not be kept.
func cacheTTL(r *mdns.Msg) (time.Duration, bool) {
	if r.Truncated {
		return 0, false
	}
	low := uint32(0)
	have := false
	take := func(v uint32) {
		if !have || v < low {
			low, have = v, true
		}
	}
	switch {
	case r.Rcode == mdns.RcodeSuccess && len(r.Answer) > 0:
		for _, sec := range [][]mdns.RR{r.Answer, r.Ns, r.Extra} {
			for _, rr := range sec {
				if rr.Header().Rrtype != mdns.TypeOPT {
					take(rr.Header().Ttl)
				}
			}
		}
	case r.Rcode == mdns.RcodeSuccess || r.Rcode == mdns.RcodeNameError:
		for _, rr := range r.Ns {
			if soa, ok := rr.(*mdns.SOA); ok {
				take(min32(soa.Hdr.Ttl, soa.Minttl))
			}
		}
	}
	if !have || low == 0 {
		return 0, false
	}
	return min(time.Duration(low)*time.Second, maxCacheTTL), true
}

func min32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

// ageTTLs lowers every TTL by age seconds (not below 1, so a client does not see a 0 it could
// read as "do not cache" while the entry is still ours to serve).
func ageTTLs(m *mdns.Msg, age uint32) {
	for _, sec := range [][]mdns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			if h.Rrtype == mdns.TypeOPT {
				continue
			}
			if h.Ttl > age {
				h.Ttl -= age
			} else {
				h.Ttl = 1
			}
		}
	}
}

// Resolver resolves a name's addresses through the cache (A then AAAA, CNAME chains as the
// upstream recursive resolver returns them). It is how the dialer finds the real destination of
// a VIP at dial time: the answer is at most one TTL old.
type Resolver struct{ Cache *Cache }

// Lookup returns name's addresses: IPv4 first. An error means neither family resolved.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	var out []netip.Addr
	var errs []string
	for _, t := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
		q := new(mdns.Msg)
		q.SetQuestion(mdns.Fqdn(name), t)
		q.Id = uint16(rand.UintN(1 << 16))
		m, err := r.Cache.Exchange(ctx, q)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if m.Rcode != mdns.RcodeSuccess {
			errs = append(errs, fmt.Sprintf("%s %s: %s", mdns.TypeToString[t], name, mdns.RcodeToString[m.Rcode]))
			continue
		}
		for _, rr := range m.Answer {
			switch v := rr.(type) {
			case *mdns.A:
				if a, ok := netip.AddrFromSlice(v.A.To4()); ok && t == mdns.TypeA {
					out = append(out, a)
				}
			case *mdns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA.To16()); ok && t == mdns.TypeAAAA {
					out = append(out, a.Unmap())
				}
			}
		}
	}
	if len(out) == 0 {
		if len(errs) == 0 {
			return nil, fmt.Errorf("resolve %s: no address upstream", name)
		}
		return nil, fmt.Errorf("resolve %s: %s", name, strings.Join(errs, "; "))
	}
	return out, nil
}
