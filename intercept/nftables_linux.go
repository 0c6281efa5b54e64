package intercept

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"mcpintercept/origin"
)

// nftablesTProxy steers with one inet table of ours:
//
//	prerouting (filter, mangle priority): local destinations and the bypass mark return; for each
//	  configured prefix jump to dst4/dst6, where each port range sets the intercept mark and
//	  tproxies to the loopback listener.
//	output (route, mangle priority): the bypass mark returns; matching flows of local processes
//	  get the intercept mark, which re-routes them via lo (policy routing) into prerouting.
//
// The ip rule "fwmark MARK lookup TABLE" and "local default dev lo" in TABLE deliver marked
// packets locally instead of forwarding them.
type nftablesTProxy struct {
	o       Options
	routing *policyRouting
}

func newNftables(o Options) *nftablesTProxy {
	return &nftablesTProxy{o: o, routing: &policyRouting{mark: o.Mark, table: o.RouteTable, priority: o.RulePriority}}
}

func (n *nftablesTProxy) Name() origin.Mechanism { return origin.NftablesTProxy }

// Origin implements Mechanism: TPROXY delivers the unmodified packet, so the accepted socket's
// local address is the original destination.
func (n *nftablesTProxy) Origin(c *net.TCPConn) (origin.Origin, error) {
	dst, err := localAddress(c)
	return originOf(origin.NftablesTProxy, dst, err)
}

func (n *nftablesTProxy) Install(ctx context.Context) error {
	v4, v6 := n.o.listenTargets()
	if err := n.installTable(v4, v6); err != nil {
		n.Remove(ctx)
		return fmt.Errorf("nftables: %w", err)
	}
	if err := n.routing.install(v4.IsValid(), v6.IsValid()); err != nil {
		n.Remove(ctx)
		return err
	}
	return nil
}

func (n *nftablesTProxy) Remove(ctx context.Context) error {
	var errs []error
	if _, err := deleteNftTablesNamed(NftTableName); err != nil {
		errs = append(errs, err)
	}
	if err := n.routing.remove(); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs)
}

func (n *nftablesTProxy) installTable(v4, v6 netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	// Replace any leftover table atomically: add (no-op if present), delete, then build anew, all in
	// one transaction.
	t := &nftables.Table{Name: NftTableName, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)

	o := n.o
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	dst4 := c.AddChain(&nftables.Chain{Name: "tproxy4", Table: t})
	dst6 := c.AddChain(&nftables.Chain{Name: "tproxy6", Table: t})

	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}

	// Packets for the appliance's own addresses (including replies to its upstream dials) are
	// never steered.
	add(pre, cat(tcpOnly(), fibDaddrLocal(), []expr.Any{ret})...)
	add(pre, cat(markMatch(o.BypassMark), []expr.Any{ret})...)
	for _, p := range o.Destinations {
		if p.Addr().Is4() && v4.IsValid() {
			add(pre, cat(tcpOnly(), daddrMatch(p), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: dst4.Name}})...)
		}
		if p.Addr().Is6() && v6.IsValid() {
			add(pre, cat(tcpOnly(), daddrMatch(p), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: dst6.Name}})...)
		}
	}
	for _, r := range o.Ports {
		if v4.IsValid() {
			add(dst4, cat(dportMatch(r), markSet(o.Mark), tproxyTo(v4, o.Port), []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}})...)
		}
		if v6.IsValid() {
			add(dst6, cat(dportMatch(r), markSet(o.Mark), tproxyTo(v6, o.Port), []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}})...)
		}
	}

	if o.Local {
		var alive *nftables.Set
		if o.Heartbeat > 0 {
			alive = &nftables.Set{Table: t, Name: aliveSet, KeyType: nftables.TypeInetService, HasTimeout: true}
			if err := c.AddSet(alive, []nftables.SetElement{{Key: be16(o.Port), Timeout: o.Heartbeat}}); err != nil {
				return fmt.Errorf("add set %s: %w", aliveSet, err)
			}
		}
		out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeRoute,
			Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle})
		outPorts := c.AddChain(&nftables.Chain{Name: "output_ports", Table: t})
		add(out, cat(markMatch(o.BypassMark), []expr.Any{ret})...)
		// Replies of the appliance's transparent sockets to clients must never be re-routed
		// into TPROXY, even when a client's address and port fall inside the steered set.
		add(out, cat(ctReply(), []expr.Any{ret})...)
		if alive != nil {
			// Fail open: without a live heartbeat element nothing is marked, so flows go direct.
			add(out, &expr.Immediate{Register: 1, Data: be16(o.Port)},
				&expr.Lookup{SourceRegister: 1, SetName: alive.Name, SetID: alive.ID, Invert: true}, ret)
		}
		for _, p := range o.Destinations {
			if (p.Addr().Is4() && v4.IsValid()) || (p.Addr().Is6() && v6.IsValid()) {
				add(out, cat(tcpOnly(), daddrMatch(p), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: outPorts.Name}})...)
			}
		}
		for _, r := range o.Ports {
			add(outPorts, cat(dportMatch(r), markSet(o.Mark), []expr.Any{ret})...)
		}
	}
	return c.Flush()
}

// aliveSet is the set whose element keeps fail-open steering alive (Options.Heartbeat).
const aliveSet = "alive"

// Beat refreshes the heartbeat element (Options.Heartbeat): flushed and re-added in one
// transaction, so its timeout starts again. It acts in the calling thread's network namespace.
func (n *nftablesTProxy) Beat() error {
	if n.o.Heartbeat <= 0 || !n.o.Local {
		return nil
	}
	return beat(NftTableName, n.o.Port, n.o.Heartbeat)
}

// beat flushes table's heartbeat set and adds port again with timeout, in one transaction.
func beat(table string, port uint16, timeout time.Duration) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	set, err := c.GetSetByName(t, aliveSet)
	if err != nil {
		return fmt.Errorf("nftables: heartbeat set: %w", err)
	}
	c.FlushSet(set)
	if err := c.SetAddElements(set, []nftables.SetElement{{Key: be16(port), Timeout: timeout}}); err != nil {
		return fmt.Errorf("nftables: heartbeat: %w", err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: heartbeat: %w", err)
	}
	return nil
}

// deleteNftTables removes every table named ours (egress and inbound), in any family. It reports
// what it removed.
func deleteNftTables() ([]string, error) {
	return deleteNftTablesNamed(NftTableName, NftInboundTableName)
}

// deleteNftTablesNamed removes every table with one of names, in any family.
func deleteNftTablesNamed(names ...string) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("nftables: list tables: %w", err)
	}
	var removed []string
	for _, t := range tables {
		if slices.Contains(names, t.Name) {
			c.DelTable(t)
			removed = append(removed, fmt.Sprintf("nftables table %s %s", familyName(t.Family), t.Name))
		}
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: delete table: %w", err)
	}
	return removed, nil
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	}
	return fmt.Sprint(f)
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func tcpOnly() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
}

func ctReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}}, // IP_CT_DIR_REPLY
	}
}

func fibDaddrLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

func markMatch(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mark), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
	}
}

func markSet(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// daddrMatch matches the network-layer destination against a prefix, including the nfproto check an
// inet table needs before reading an address of a given family.
func daddrMatch(p netip.Prefix) []expr.Any {
	p = p.Masked()
	proto, off, size := byte(unix.NFPROTO_IPV4), uint32(16), 4
	if p.Addr().Is6() {
		proto, off, size = unix.NFPROTO_IPV6, 24, 16
	}
	mask := make([]byte, size)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(size)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(size), Mask: mask, Xor: make([]byte, size)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
	}
}

func be16(v uint16) []byte { b := make([]byte, 2); binary.BigEndian.PutUint16(b, v); return b }

func dportMatch(r PortRange) []expr.Any {
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	if r.From == r.To {
		return []expr.Any{load, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(r.From)}}
	}
	return []expr.Any{load, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: be16(r.From), ToData: be16(r.To)}}
}

func tproxyTo(a netip.Addr, port uint16) []expr.Any {
	fam := byte(unix.NFPROTO_IPV4)
	if a.Is6() {
		fam = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a.AsSlice()},
		&expr.Immediate{Register: 2, Data: be16(port)},
		&expr.TProxy{Family: fam, TableFamily: unix.NFPROTO_INET, RegAddr: 1, RegPort: 2},
	}
}

// CheckNftTable reports whether our table (inet mcpintercept) is installed in the calling thread's
// network namespace (the node agent's CNI CHECK of a pod).
func CheckNftTable() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nftables: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == NftTableName {
			return nil
		}
	}
	return fmt.Errorf("nftables table inet %s is missing", NftTableName)
}
