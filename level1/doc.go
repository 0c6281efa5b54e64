// Package level1 implements awareness Level 1 of the draft's Transparent mode as stages of the
// exchange pipeline (package exchange): it extracts MCP metadata from headers only, applies header
// policy and rate limits, and forwards every byte unmodified.
//
// Classifier turns a request head into an mcp.Info for policy and logs (mcp.InfoOf reads it from
// the exchange); it never holds a credential (a URI-shaped Mcp-Name loses its userinfo, query and
// fragment: mcp.RedactURI). Its MCP fields are the client's claim: servers check them against the
// body only from the version that mcp.Version.ServerChecksHeaders names, which is why
// Guards.StrictMCPHeaders refuses older versions. Before any policy it refuses what no rule should have to judge: a
// protocol switch (Upgrade, CONNECT, h2c) the route does not allow (403; after a switch nothing can
// be judged), a Host other than the connection's (421), an unreadable MCP header and, on strict
// routes, requests whose MCP headers cannot be trusted (400).
//
// HeaderPolicy judges each request by the flow's rule set (Flow), with the CEL variables client
// and conn from the engine and http and mcp built here, and maps the decision to the answer:
// deny is 403, rate_limited 429 with Retry-After. Level 1 never writes a JSON-RPC body, never
// opens a circuit breaker, and passes upstream transport errors on as they happened (the
// exchange loop does).
package level1
