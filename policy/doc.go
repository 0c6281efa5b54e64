// Package policy compiles and evaluates the rule language (CEL) into decisions. It performs no I/O.
//
// A rule set is an ordered list of rules. Each rule has a CEL `when` expression over four
// variables — client, conn, http and mcp, each a map(string, dyn) so that new request facts can be
// added later without breaking rules already written — and an action: allow, deny or rate_limit.
// The first rule whose `when` is true decides; a rate limit that still has budget lets evaluation
// go on to the following rules, so a limit can sit in front of the allow/deny list. When no rule
// matches, the request is allowed.
//
// Absent facts are normal, not errors: MCP clients older than protocol 2026-07-28 send no
// Mcp-Method or Mcp-Name header, so a rule on mcp.method must not match such a request, and the
// decision names the field that was missing so the decision log can say why (Layer 5 of the
// intermediary draft: "MUST log policy decisions for audit purposes").
//
// Everything that can be prepared ahead is prepared by Compile, because Evaluate runs on the
// per-request hot path from many goroutines at once.
package policy
