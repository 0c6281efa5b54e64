package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Reference is the configuration reference (docs/configuration.md): every key of the file, its
// type, its default and what it is for, generated from the schema tables that decode, default
// and check the file, so the document cannot drift from what the appliance reads.
// TestReference fails when the committed document is stale.
func Reference() string {
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from the schema in package config (config.Reference); do not edit.\n")
	b.WriteString("     Regenerate: go test ./config/ -run TestReference -update -->\n\n")
	b.WriteString("Every key of the YAML file, in the order `check` lists them. Defaults are those of\n")
	b.WriteString("`mechanism: nftables-tproxy` where a default depends on the mechanism; `—` means no default\n")
	b.WriteString("(unset, or required where the description says so). Cross-key rules are in `check`'s messages.\n\n")
	writeTable(&b, "Top level", "", configTable, Default(NftablesTProxy))
	var r Route
	routeTable.fill(&r, "", nil)
	writeTable(&b, "A route (`routes[]`, and `default_route` without name and match)", "routes[].", routeTable, &r)
	rule := Rule{RateLimit: &RateLimit{}, Redact: &Redact{}}
	ruleTable.fill(&rule, "", nil)
	rateLimitTable.fill(&rule, "", nil)
	redactTable.fill(&rule, "", nil)
	writeTable(&b, "A rule (`rule_sets.NAME[]`)", "rule_sets.NAME[].", ruleTable, &rule)
	writeTable(&b, "A rule's `rate_limit`", "rule_sets.NAME[].rate_limit.", rateLimitTable, &rule)
	writeTable(&b, "A rule's `redact`", "rule_sets.NAME[].redact.", redactTable, &rule)
	var ti TokenIssuer
	issuerTable.fill(&ti, "", nil)
	writeTable(&b, "A token issuer (`tokens.issuers[]`)", "tokens.issuers[].", issuerTable, &ti)
	var tp ToolPattern
	toolPatternTable.fill(&tp, "", nil)
	writeTable(&b, "A hidden-content pattern (`tool_integrity.patterns[]`)", "tool_integrity.patterns[].", toolPatternTable, &tp)
	var fd FederationDownstream
	federationDownstreamTable.fill(&fd, "", nil)
	writeTable(&b, "A federation downstream (`federation.downstreams[]`)", "federation.downstreams[].", federationDownstreamTable, &fd)
	var fh FederationHeader
	writeTable(&b, "A downstream header (`federation.downstreams[].headers.NAME`)", "federation.downstreams[].headers.NAME.", federationHeaderTable, &fh)
	return b.String()
}

func writeTable[S any](b *strings.Builder, title, prefix string, t table[S], s *S) {
	fmt.Fprintf(b, "## %s\n\n| key | type | default | description |\n|---|---|---|---|\n", title)
	for _, st := range t {
		typ, dflt := st.describe(s)
		if dflt == "" {
			dflt = "—"
		} else {
			dflt = "`" + dflt + "`"
		}
		fmt.Fprintf(b, "| `%s%s` | %s | %s | %s |\n", prefix, st.keyPath(), typ, dflt, cell(st.keyDoc()))
	}
	b.WriteString("\n")
}

// cell keeps a description inside its table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// typeName is how the reference names a Go type of the file.
func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return "duration (`30s`, `5m`)"
	case reflect.TypeFor[netip.Prefix]():
		return "prefix (`10.0.0.0/8`)"
	case reflect.TypeFor[netip.Addr]():
		return "address"
	case reflect.TypeFor[netip.AddrPort]():
		return "address:port"
	case reflect.TypeFor[PortRange]():
		return "port or range (`8080`, `\"3000-3010\"`)"
	case reflect.TypeFor[time.Duration]():
		return "duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "mapping of " + typeName(t.Elem())
	case reflect.Bool:
		return "bool"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Int32:
		return "integer"
	case reflect.Float64, reflect.Float32:
		return "number"
	}
	return t.Kind().String()
}

// showValue is a default as the file would spell it (YAML flow style), "" for none.
func showValue(v reflect.Value) string {
	if !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return ""
	}
	if v.Kind() == reflect.Slice && v.Len() == 0 {
		return "[]"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.Slice {
		return s.String()
	}
	n := &yaml.Node{}
	if err := n.Encode(v.Interface()); err != nil {
		return fmt.Sprint(v.Interface())
	}
	setFlow(n)
	out, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Sprint(v.Interface())
	}
	return strings.TrimSpace(string(out))
}

func setFlow(n *yaml.Node) {
	n.Style |= yaml.FlowStyle
	for _, c := range n.Content {
		setFlow(c)
	}
}
