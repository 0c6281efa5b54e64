// Package federation is Conduit's federation path inside the appliance: one local Streamable
// HTTP MCP endpoint that publishes the tools of configured downstream servers as one aggregate,
// each as <downstream-id>.<downstream-tool-name>, and dispatches each call to the exact
// downstream and original name it was published for.
//
//	client → ingress → immutable registry + policy → durable authorization audit → dispatcher → downstream
//
// Discovery refreshes every downstream's catalog (server/discover and tools/list, bounded by
// pages, tools and bytes); the catalogs that succeeded are published as one immutable
// generation, or, on a collision or an aggregate limit, not at all (the previous generation
// stays). A failed refresh withdraws its downstream's catalog. A call is prepared against the
// current generation, judged, and committed under the registry's read lock: the check that its
// generation and rule set are still the published ones and the durable audit record happen with
// no publication in between; the lock is released before any network I/O, and no downstream
// transport starts when the record cannot be written. The dispatcher sends exactly one
// tools/call to the configured URL with the original tool name and the configured headers (no
// discovery, redirects or retries per call); once it started, an outcome that is not a
// correlated JSON-RPC answer is uncertain-after-dispatch, recorded and returned, never retried.
package federation
