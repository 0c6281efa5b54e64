package policy

import (
	"fmt"
	"strings"
)

// Provenance is who may set a field's value: the rule "identity and authority come only from the
// client's own side" made checkable. A field whose provenance is ProvClient is read only from what
// the client itself sent (its request head, its initialize, its own requests' _meta), per flow and
// per session: a server→client message that carries such a value (clientInfo in its _meta) never
// changes what a rule reads.
type Provenance string

// The provenances.
const (
	// ProvClient: the client's own bytes on its side of the connection (request head, body of its
	// requests, its TLS ClientHello), remembered per flow and per session.
	ProvClient Provenance = "client"
	// ProvNetwork: the connection as the kernel reports it (peer address, original destination).
	ProvNetwork Provenance = "network"
	// ProvHost: the machine or orchestrator the client runs on (eBPF process identity, the
	// Kubernetes API's pod record; pod labels are written by the workload's owner).
	ProvHost Provenance = "host"
	// ProvAppliance: the appliance's own configuration or judgement (mechanism, TLS disposition,
	// which side a message came from, tool-integrity verdicts).
	ProvAppliance Provenance = "appliance"
	// ProvSender: the bytes of the message being judged, so the client's for a client→server
	// message and the server's for a server→client one (a server request's method and id).
	ProvSender Provenance = "sender"
	// ProvServer: the server's bytes (results, errors, an elicitation's mode).
	ProvServer Provenance = "server"
	// ProvToken: the client's credential, as issued by its issuer (trusted as the issuer's only
	// when auth.verified).
	ProvToken Provenance = "token"
)

// provenance is the provenance of every field of every variable, by path. init refuses a field
// without one, so a new field cannot be added without saying who may set it.
var provenance = map[string]Provenance{
	"client.address": ProvNetwork, "client.port": ProvNetwork,
	"client.pid": ProvHost, "client.uid": ProvHost, "client.gid": ProvHost, "client.comm": ProvHost,
	"client.exe": ProvHost, "client.cgroup": ProvHost, "client.pod": ProvHost,
	"conn.orig_dst": ProvNetwork, "conn.orig_ip": ProvNetwork, "conn.orig_port": ProvNetwork,
	"conn.sni": ProvClient, "conn.mechanism": ProvAppliance, "conn.tls": ProvAppliance,
	"conn.credential": ProvAppliance,
	"http.method":     ProvClient, "http.path": ProvClient, "http.headers": ProvClient,
	"mcp.version": ProvClient, "mcp.session": ProvClient, "mcp.tool": ProvClient, "mcp.retry": ProvClient,
	"mcp.client_info": ProvClient,
	"mcp.method":      ProvSender, "mcp.name": ProvSender, "mcp.id": ProvSender, "mcp.kind": ProvSender,
	"mcp.arguments": ProvSender,
	"mcp.direction": ProvAppliance, "mcp.tool_findings": ProvAppliance, "mcp.tool_pinned": ProvAppliance,
	"mcp.tool_changed": ProvAppliance,
	"mcp.mode":         ProvServer, "mcp.error": ProvServer, "mcp.result": ProvServer,
	"auth.present": ProvClient, "auth.scheme": ProvClient, "auth.verified": ProvAppliance, "auth.claims": ProvToken,
	"downstream.id": ProvAppliance, "downstream.tool": ProvServer,
}

// provenanceNote says, where it is not obvious, where exactly a field is read from.
var provenanceNote = map[string]string{
	"client.pod":      "the node agent's record of the pod (Kubernetes API): the enrolled pod for its own egress; for an inbound (Sidecar) flow the pod whose status.podIPs holds the connection's source address; its labels are written by the workload's owner",
	"conn.sni":        "the client's ClientHello",
	"http.headers":    "the client's request head (for a server→client message: the request that opened the exchange)",
	"mcp.version":     "MCP-Protocol-Version or _meta protocolVersion of the client's request; else its session's, negotiated by its initialize (the answer the client accepted); never a server→client message",
	"mcp.session":     "Mcp-Session-Id the client sends (a repeated one is refused); 2024-11-05: the endpoint its POSTs go to",
	"mcp.tool":        "the client's tools/call, prompts/get or resources/read the server request belongs to",
	"mcp.retry":       "the client's repeated request",
	"mcp.client_info": "the client's initialize or its own requests' _meta, per exchange, session and flow; for a server→client message whose client cannot be told: unknown",
	"mcp.method":      "for a response, the method of the client's request it answers",
	"mcp.name":        "for a server→client request, the tool of the client's call (mcp.tool)",
	"mcp.kind":        "the message's shape",
	"auth.claims":     "the sender's token; the issuer's word only when auth.verified",
	"downstream.id":   "the appliance's own route table: the configured id of the downstream the aggregate name (mcp.name) routes to; the client's name is only looked up, never split",
	"downstream.tool": "the downstream's own tools/list: the name it lists the tool under (the original name)",
}

func init() {
	for _, o := range roots {
		for _, f := range o.fields {
			p, ok := provenance[f.path]
			if !ok {
				panic("policy: field " + f.path + " has no provenance")
			}
			f.prov = p
		}
	}
}

// FieldDoc describes one field of a rule variable.
type FieldDoc struct {
	Path  string     // client.address, mcp.client_info, …
	Type  string     // its CEL type
	Level Level      // the lowest awareness level that can see it
	Prov  Provenance // who may set it
	Note  string     // where exactly it is read from, when not obvious
	Doc   string
}

// Fields lists every field of every variable, in declaration order.
func Fields() []FieldDoc {
	var out []FieldDoc
	for _, o := range roots {
		for _, f := range o.fields {
			out = append(out, FieldDoc{Path: f.path, Type: f.typ.String(), Level: f.level, Prov: f.prov,
				Note: provenanceNote[f.path], Doc: f.doc})
		}
	}
	return out
}

// ProvenanceMarkdown is the README's table of who may set each field.
func ProvenanceMarkdown() string {
	var b strings.Builder
	b.WriteString("| field | level | set by | read from |\n|---|---|---|---|\n")
	for _, f := range Fields() {
		note := f.Doc
		if f.Note != "" {
			note = f.Note
		}
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s |\n", f.Path, f.Level, f.Prov, strings.ReplaceAll(note, "|", "\\|"))
	}
	return b.String()
}
