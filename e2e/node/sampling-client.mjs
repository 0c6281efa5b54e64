// A real MCP client from the official TypeScript SDK that declares the sampling, elicitation
// (form and URL) and roots capabilities and answers those server→client requests with fixed,
// deterministic results, so that a server's sampling and elicitation tools (server-everything's
// trigger-sampling-request, trigger-elicitation-request) can be called end to end.
//
//   node sampling-client.mjs URL [--name CLIENT_NAME] --call TOOL JSON
//       lists the tools (waiting briefly for the capability-dependent ones a server registers
//       after initialization), calls TOOL and prints
//       {tools, call: {tool, is_error, text, error}, served: {sampling, elicitation, roots}}
//
// --name sets clientInfo.name (policy can read it as mcp.client_info.name).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
const url = argv[0];
let name = "mcpintercept-lab-sampling-client";
let call = null;
for (let i = 1; i < argv.length; i++) {
  if (argv[i] === "--name") name = argv[++i];
  else if (argv[i] === "--call") call = { name: argv[++i], args: JSON.parse(argv[++i] || "{}") };
}
if (!url || !call) {
  console.error("usage: node sampling-client.mjs URL [--name NAME] --call TOOL JSON");
  process.exit(2);
}

const served = { sampling: 0, elicitation: 0, roots: 0 };
const client = new Client(
  { name, version: "1.0.0" },
  { capabilities: { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } } },
);
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  served.sampling++;
  return { role: "assistant", content: { type: "text", text: "a canned completion from the lab client" }, model: "lab-model", stopReason: "endTurn" };
});
client.setRequestHandler(ElicitRequestSchema, async () => {
  served.elicitation++;
  return { action: "decline" };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  served.roots++;
  return { roots: [{ uri: "file:///lab", name: "lab" }] };
});

const transport = new StreamableHTTPClientTransport(new URL(url));
try {
  await client.connect(transport);
  let tools = [];
  for (let i = 0; i < 20; i++) {
    tools = (await client.listTools()).tools.map((t) => t.name).sort();
    if (tools.includes(call.name)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  let out;
  try {
    const r = await client.callTool({ name: call.name, arguments: call.args }, undefined, { timeout: 20000 });
    out = { tool: call.name, is_error: !!r.isError, text: r.content?.map((c) => c.text).join("") };
  } catch (err) {
    out = { tool: call.name, error: { code: err?.code, message: String(err?.message), data: err?.data } };
  }
  // Requests the server makes on its own (roots/list after initialization) are not part of the
  // comparison; only what this call caused.
  console.log(JSON.stringify({ tools, call: out, served: { sampling: served.sampling, elicitation: served.elicitation } }));
  await client.close();
  process.exit(0);
} catch (err) {
  console.error(`mcp sampling client: ${err?.stack || err}`);
  process.exit(1);
}
