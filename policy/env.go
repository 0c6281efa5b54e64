package policy

import (
	"fmt"
	"net/netip"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// The variables a rule can read. They are maps of dyn rather than declared object types so that
// fields added later (process identity, for one) do not invalidate rules written today.
const (
	varClient = "client"
	varConn   = "conn"
	varHTTP   = "http"
	varMCP    = "mcp"
)

// celEnv is built once: it is immutable, safe for concurrent use, and costly enough (milliseconds)
// that rebuilding it per Compile would make reloads and the fuzz test needlessly slow.
var celEnv = sync.OnceValues(newEnv)

func newEnv() (*cel.Env, error) {
	env, err := cel.NewEnv(
		cel.Variable(varClient, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varConn, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varHTTP, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varMCP, cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
		cel.Function("cidr_contains",
			cel.Overload("cidr_contains_string_string",
				[]*cel.Type{cel.StringType, cel.StringType}, cel.BoolType,
				cel.BinaryBinding(cidrContains))),
	)
	if err != nil {
		return nil, fmt.Errorf("build cel environment: %w", err)
	}
	return env, nil
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
