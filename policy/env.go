package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// celEnv is built once: it is immutable, safe for concurrent use, and costly enough (milliseconds)
// that rebuilding it per Compile would make reloads and the fuzz test needlessly slow.
var celEnv = sync.OnceValues(newEnv)

func newEnv() (*cel.Env, error) {
	prov, err := newProvider()
	if err != nil {
		return nil, fmt.Errorf("build type registry: %w", err)
	}
	opts := []cel.EnvOption{
		cel.CustomTypeProvider(prov),
		cel.CustomTypeAdapter(prov),
		ext.Strings(),
		cel.Function("cidr_contains",
			cel.Overload("cidr_contains_string_string",
				[]*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(cidrContains))),
		cel.Function("prefix",
			cel.Overload("prefix_string_int",
				[]*cel.Type{cel.StringType, cel.IntType}, cel.StringType,
				cel.BinaryBinding(prefixOf)),
			cel.Overload("prefix_string_int_int",
				[]*cel.Type{cel.StringType, cel.IntType, cel.IntType}, cel.StringType,
				cel.FunctionBinding(prefixByFamily))),
	}
	for _, o := range roots {
		opts = append(opts, cel.Variable(o.varName, o.typ))
		opts = append(opts, wholeUses(o)...)
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("build cel environment: %w", err)
	}
	return env, nil
}

// wholeUses keeps the map-like uses of a variable that rules could write when the variables were
// maps: a computed key (mcp[k]), membership ("name" in mcp) and size(mcp). Such a use reads every
// field of the variable (Set.Needs). The overloads have no binding of their own: CEL's index,
// @in and size dispatch on the value, and a whole variable becomes a map (provider.NativeToValue).
func wholeUses(o *object) []cel.EnvOption {
	id := strings.ReplaceAll(o.typ.TypeName(), ".", "_")
	return []cel.EnvOption{
		cel.Function(operators.Index,
			cel.Overload("index_"+id+"_string", []*cel.Type{o.typ, cel.StringType}, cel.DynType)),
		cel.Function(operators.In,
			cel.Overload("in_string_"+id, []*cel.Type{cel.StringType, o.typ}, cel.BoolType)),
		cel.Function(overloads.Size,
			cel.Overload("size_"+id, []*cel.Type{o.typ}, cel.IntType)),
	}
}

// cidrContains reports whether ip lies in cidr. A malformed CIDR is the rule author's mistake and
// is reported as an error; an address that does not parse is request data (a Unix socket peer, an
// empty field) and simply is not in any range.
func cidrContains(cidrVal, ipVal ref.Val) ref.Val {
	cidr, ok := cidrVal.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(cidrVal)
	}
	ipStr, ok := ipVal.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(ipVal)
	}
	prefix, err := netip.ParsePrefix(string(cidr))
	if err != nil {
		return types.NewErr("cidr_contains: invalid CIDR %q", string(cidr))
	}
	addr, err := netip.ParseAddr(string(ipStr))
	if err != nil {
		// Accept "IP:port" too: conn.orig_dst has that form and writing the split in CEL is clumsy.
		ap, err2 := netip.ParseAddrPort(string(ipStr))
		if err2 != nil {
			return types.False
		}
		addr = ap.Addr()
	}
	// An IPv4 client seen on a dual-stack socket arrives as ::ffff:a.b.c.d; an IPv4 range must
	// still match it.
	if prefix.Addr().Is4() {
		addr = addr.Unmap()
	}
	return types.Bool(prefix.Contains(addr.WithZone("")))
}

// prefixOf implements prefix(addr, bits): the network of addr with its first bits bits kept, in
// canonical text ("2001:db8:1:2::/64", "10.1.2.0/24"). An IPv4-mapped IPv6 address (how an IPv4
// client appears on a dual-stack socket) is unmapped first, so it takes IPv4 lengths. "IP:port"
// is accepted like in cidr_contains. Unlike cidr_contains, an address that does not parse is an
// error: the result is meant as a rate limit key, and one bucket for every unparsable address
// would be a surprise.
func prefixOf(addrVal, bitsVal ref.Val) ref.Val {
	addr, errv := parseAddrVal("prefix", addrVal)
	if errv != nil {
		return errv
	}
	return maskedPrefix(addr, bitsVal)
}

// prefixByFamily implements prefix(addr, bits4, bits6): bits4 for an IPv4 (or IPv4-mapped)
// address, bits6 for an IPv6 one. prefix(client.address, 32, 64) is the unit the engine's
// max_flows_per_client counts by.
func prefixByFamily(args ...ref.Val) ref.Val {
	if len(args) != 3 {
		return types.NewErr("prefix: want 2 or 3 arguments, got %d", len(args))
	}
	addr, errv := parseAddrVal("prefix", args[0])
	if errv != nil {
		return errv
	}
	if addr.Is4() {
		return maskedPrefix(addr, args[1])
	}
	return maskedPrefix(addr, args[2])
}

func parseAddrVal(fn string, v ref.Val) (netip.Addr, ref.Val) {
	s, ok := v.(types.String)
	if !ok {
		return netip.Addr{}, types.MaybeNoSuchOverloadErr(v)
	}
	addr, err := netip.ParseAddr(string(s))
	if err != nil {
		ap, err2 := netip.ParseAddrPort(string(s))
		if err2 != nil {
			return netip.Addr{}, types.NewErr("%s: invalid IP address %q", fn, truncate(string(s), 64))
		}
		addr = ap.Addr()
	}
	return addr.Unmap().WithZone(""), nil
}

func maskedPrefix(addr netip.Addr, bitsVal ref.Val) ref.Val {
	bits, ok := bitsVal.(types.Int)
	if !ok {
		return types.MaybeNoSuchOverloadErr(bitsVal)
	}
	if bits < 0 || int64(bits) > int64(addr.BitLen()) {
		return types.NewErr("prefix: length %d out of range for %s (0 to %d)", int64(bits), addr, addr.BitLen())
	}
	p, err := addr.Prefix(int(bits))
	if err != nil {
		return types.NewErr("prefix: %v", err)
	}
	return types.String(p.String())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
