// Package policy compiles and evaluates the rule language (CEL) into decisions. It performs no I/O:
// no logging, no metrics. It returns facts (Decision.Absent, Decision.Errors) and the caller
// counts and logs them.
//
// A rule set is an ordered list of rules. Each rule has a CEL `when` expression over four
// variables — client, conn, http and mcp — and an action: allow, deny or rate_limit.
// The first rule whose `when` is true decides; a rate limit that still has budget lets evaluation
// go on to the following rules, so a limit can sit in front of the allow/deny list. When no rule
// matches, the request is allowed.
//
// A fourth action, redact, decides nothing: a redact rule whose `when` is true adds its compiled
// redact block (JSON paths, RE2 patterns, marker) to Decision.Redactions and evaluation goes on,
// so a later deny still denies; Level 2 applies the blocks to the message. Input.Probe asks what
// the rules would decide about a message that is not being sent (a listed tool a client might
// call): rate_limit rules, which would spend a token, and redact rules are skipped.
//
// # Shadow rules
//
// A deny or rate_limit rule with Mode ModeShadow is a dry run (Envoy's shadow_rules, Istio's
// AUDIT). It is evaluated where it stands, as if it were enforced: when it would have decided —
// its `when` is true, its limit has no token left, or it failed to evaluate and would have denied
// failing closed — a ShadowHit goes into Decision.Shadow and evaluation goes on, so the request
// is decided by the other rules; Reason ends with "would_deny by RULE (shadow): REASON" (or
// would_rate_limit) for each. A shadow rule after the deciding rule is not reached, as it would
// not be if enforced. A shadow limit meters with its own buckets, like every rate_limit rule, so
// it never spends a token an enforced limit counts on. Probes skip shadow rules: a dry run never
// hides a listed tool. Explain says what every rule made of a request, for offline replays.
//
// # Variables
//
// The variables are CEL object types whose fields are declared once (schema.go), each with its
// CEL type and the lowest awareness level that can see it: client.* and conn.* at every level,
// http.* and mcp.version, method, name and session (from headers) from Level 1, the rest of mcp.*
// (arguments, result, error, client_info, direction, kind, id, tool, mode, retry, and tool
// integrity's tool_findings, tool_pinned and tool_changed) at Level 2 only. downstream.id and
// downstream.tool (Vars.Downstream) are the route of a call or list entry on a federation's
// aggregate endpoint: the configured downstream id the appliance's route table maps the aggregate
// name to (mcp.name stays that name, "files.read"), and the tool's name as that downstream lists
// it ("read"). They are Level 2, and absent outside a federation evaluation. A field that does not exist (mcp.tool_name) or a type that cannot match (mcp.name > 3)
// is a compile error at its file:line:col; Set.CheckLevel reports a field the route's level
// cannot see. A variable used as a whole (mcp[k], "name" in mcp, size(mcp)) reads every field.
//
// Callers fill Input.Vars: plain fields for strings and numbers, and a Body and a HeaderSource
// that produce arguments, result, client info and headers only when a rule reads them
// (Set.Needs says which). The map fields of Input are the older form, still read when set.
//
// # Absent fields
//
// Absent facts are normal, not errors: MCP clients older than protocol 2026-07-28 send no
// Mcp-Method or Mcp-Name header, so a rule on mcp.method must not match such a request, and the
// decision names the field that was missing so the decision log can say why (Layer 5 of the
// intermediary draft: "MUST log policy decisions for audit purposes"). A field is absent when the
// request did not carry it (an empty string field of Message, a nil struct, a key missing from a
// map such as http.headers), whether the key is written out (mcp.method,
// http.headers["x-tenant"]) or computed (http.headers[mcp.name]).
//
// A rate_limit key that reads an absent field does not skip the rule: every request whose key
// is absent is metered in one bucket of that rule, the "absent" bucket (kept apart from the
// bucket of any real key value, the string "absent" included), so that leaving out the header a
// limit is keyed by does not escape the limit. The absent field is listed in Decision.Absent.
//
// # Unknown fields
//
// Unknown is not absent. A field named in Vars.Unknown exists but the caller cannot establish its
// value for this message (Level 2 cannot tell which client a server→client request goes to, so
// mcp.client_info is unknown). Reading it — a member, an index, the whole variable, a rate limit
// key, and has() alike — makes the rule fail to evaluate (Input.FailOpen decides, closed by
// default): a guess, or "no match", would let the message past a rule written to stop it. A rule
// that does not reach the field (short-circuited) decides as before.
//
// # Provenance
//
// Every field says who may set it (Provenance: client, network, host, appliance, sender, server,
// token; Fields, ProvenanceMarkdown). Callers fill ProvClient fields only from the client's own
// side, never from a server→client message.
//
// # Rule errors
//
// Any other failure at run time — `int(http.headers["x"]) > 3` on a header that is not a
// number, a `when` that yields a string, prefix() of something that is not an address, a key
// that cannot be made a string — is a rule error. It is never a silent non-match. By default
// (Input.FailOpen false) a deny or rate_limit rule that errors decides the request: deny, with
// Decision.Rule naming it and the reason "rule NAME failed to evaluate: MESSAGE". With FailOpen
// the rule is skipped. An allow rule that errors is skipped either way. Every rule that errored
// is listed in Decision.Errors, and a default allow after errors says so in its reason ("no rule
// matched; rule NAME failed to evaluate: ...").
//
// # Functions
//
// Besides CEL's standard library and its string extensions:
//
//   - cidr_contains(cidr, addr) bool: addr ("IP" or "IP:port") lies in cidr. An IPv4-mapped
//     client address matches an IPv4 range. An addr that does not parse is in no range.
//   - prefix(addr, bits) string: the network of addr ("IP" or "IP:port") with bits bits kept, in
//     canonical text: prefix("2001:db8:1:2:3:4:5:6", 64) is "2001:db8:1:2::/64",
//     prefix("10.1.2.3", 24) is "10.1.2.0/24". An IPv4-mapped IPv6 address is unmapped first
//     and takes IPv4 lengths. An address that does not parse, or bits outside 0 to 32 (IPv4) or
//     0 to 128 (IPv6), is a rule error.
//   - prefix(addr, bits4, bits6) string: prefix with bits4 for IPv4 and bits6 for IPv6.
//
// For an IPv6 client, client.address is the full address, a /128; one host usually holds a
// whole /64 and can rotate through it freely. prefix(client.address, 64) is the /64 that the
// engine's flow limits (max_flows_per_client) count by, and prefix(client.address, 32, 64) is
// exactly their unit for IPv4 and IPv6 clients alike, so a per-client rate limit should be keyed
// by it rather than by client.address.
//
// # Rate limit state
//
// Every rate_limit rule has a store of buckets of its own, bounded by RateLimit.MaxKeys (least
// recently used key forgotten first), so a flood of keys metered by one rule cannot evict the
// bucket of a client another rule is limiting. CompileWithState hands the store to the new Set
// while the rule keeps its name and key expression.
//
// Everything that can be prepared ahead is prepared by Compile, because Evaluate runs on the
// per-request hot path from many goroutines at once.
package policy
