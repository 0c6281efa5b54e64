package intercept

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Install puts Sidecar mode's steering in place: one inet table of its own,
//
//	prerouting (filter, mangle priority): packets from lo (the appliance's own delivery to the
//	  server, the host's own clients) and the bypass mark return; a TCP packet for a local address
//	  (one of Addresses, when set) jumps to in4/in6, where each of the server's port ranges sets
//	  the intercept mark and tproxies to the inbound listener.
//	output (route, mangle priority): a connection the appliance opens with the bypass mark to a
//	  local address on one of the server's ports is tagged (ct mark); the server's reply packets
//	  on such a connection get the intercept mark, so policy routing delivers them locally to the
//	  appliance's transparent socket (bound to the client's address) instead of sending them to the
//	  client.
//
// and the policy routing rule of the intercept mark (shared with nftables-tproxy). On error
// whatever was installed is removed.
func (in *Inbound) Install(ctx context.Context) error {
	v4, v6 := in.targets()
	if !v4.IsValid() && !v6.IsValid() {
		return fmt.Errorf("inbound: no listen address")
	}
	if err := in.installTable(v4, v6); err != nil {
		in.Remove(ctx)
		return fmt.Errorf("inbound: nftables: %w", err)
	}
	if err := in.routing().install(v4.IsValid(), v6.IsValid()); err != nil {
		in.Remove(ctx)
		return fmt.Errorf("inbound: %w", err)
	}
	return nil
}

// Remove deletes the inbound table and the policy routing. It is idempotent.
func (in *Inbound) Remove(context.Context) error {
	var errs []error
	if _, err := deleteNftTablesNamed(NftInboundTableName); err != nil {
		errs = append(errs, err)
	}
	if err := in.routing().remove(); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs)
}

func (in *Inbound) installTable(v4, v6 netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	t := &nftables.Table{Name: NftInboundTableName, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	o := in.o
	add := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	ret := []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	jump := func(ch *nftables.Chain) []expr.Any {
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name}}
	}

	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	in4 := c.AddChain(&nftables.Chain{Name: "in4", Table: t})
	in6 := c.AddChain(&nftables.Chain{Name: "in6", Table: t})
	add(pre, cat(iifname("lo"), ret)...)
	add(pre, cat(markMatch(o.BypassMark), ret)...)
	if o.Heartbeat > 0 {
		alive := &nftables.Set{Table: t, Name: aliveSet, KeyType: nftables.TypeInetService, HasTimeout: true}
		if err := c.AddSet(alive, []nftables.SetElement{{Key: be16(o.ListenPort), Timeout: o.Heartbeat}}); err != nil {
			return fmt.Errorf("add set %s: %w", aliveSet, err)
		}
		// Fail open: without a live heartbeat element nothing is steered, so clients reach the
		// server directly.
		add(pre, cat([]expr.Any{&expr.Immediate{Register: 1, Data: be16(o.ListenPort)},
			&expr.Lookup{SourceRegister: 1, SetName: alive.Name, SetID: alive.ID, Invert: true}}, ret)...)
	}
	if len(o.Addresses) == 0 {
		if v4.IsValid() {
			add(pre, cat(tcpOnly(), nfproto(unix.NFPROTO_IPV4), fibDaddrLocal(), jump(in4))...)
		}
		if v6.IsValid() {
			add(pre, cat(tcpOnly(), nfproto(unix.NFPROTO_IPV6), fibDaddrLocal(), jump(in6))...)
		}
	}
	for _, a := range o.Addresses {
		a = a.Unmap()
		switch {
		case a.Is4() && v4.IsValid():
			add(pre, cat(tcpOnly(), daddrMatch(netip.PrefixFrom(a, 32)), fibDaddrLocal(), jump(in4))...)
		case a.Is6() && v6.IsValid():
			add(pre, cat(tcpOnly(), daddrMatch(netip.PrefixFrom(a, 128)), fibDaddrLocal(), jump(in6))...)
		}
	}
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	for _, r := range o.Ports {
		if v4.IsValid() {
			add(in4, cat(dportMatch(r), markSet(o.Mark), tproxyTo(v4, o.ListenPort), accept)...)
		}
		if v6.IsValid() {
			add(in6, cat(dportMatch(r), markSet(o.Mark), tproxyTo(v6, o.ListenPort), accept)...)
		}
	}

	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeRoute,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityMangle})
	outPorts := c.AddChain(&nftables.Chain{Name: "output_ports", Table: t})
	// The server's replies on a tagged connection: made local, so they reach the appliance.
	add(out, cat(ctReply(), ctMarkMatch(o.Mark), markSet(o.Mark), ret)...)
	// The appliance's delivery to the server: tagged.
	add(out, cat(tcpOnly(), markMatch(o.BypassMark), ctOriginal(), fibDaddrLocal(), jump(outPorts))...)
	for _, r := range o.Ports {
		add(outPorts, cat(dportMatch(r), ctMarkSet(o.Mark), ret)...)
	}
	return c.Flush()
}

func iifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func ctOriginal() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyDIRECTION},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
	}
}

func ctMarkMatch(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
	}
}

func ctMarkSet(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
	}
}

func (in *Inbound) routing() *policyRouting {
	return &policyRouting{mark: in.o.Mark, table: in.o.RouteTable, priority: in.o.RulePriority}
}

// Beat refreshes the heartbeat element (InboundOptions.Heartbeat). It acts in the calling
// thread's network namespace.
func (in *Inbound) Beat() error {
	if in.o.Heartbeat <= 0 {
		return nil
	}
	return beat(NftInboundTableName, in.o.ListenPort, in.o.Heartbeat)
}
