// The official TypeScript SDK client over the 2024-11-05 HTTP+SSE transport (SSEClientTransport:
// GET the stream, POST to the endpoint it announces, answers arrive on the stream), declaring
// the sampling capability and answering sampling requests with a fixed completion. It is
// sampling-client.mjs for a legacy server: issue 16 case 13 checks that a rule on
// mcp.client_info judges a legacy client, whose session is the endpoint URL, not a header.
//
//   node legacy-sampling-client.mjs URL [--name CLIENT_NAME] --call TOOL JSON
//       lists the tools, calls TOOL and prints {tools, call: {tool, is_error, text, error},
//       served: {sampling}}
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { CreateMessageRequestSchema, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
const url = argv[0];
let name = "mcpintercept-lab-legacy-sampling-client";
let call = null;
for (let i = 1; i < argv.length; i++) {
  if (argv[i] === "--name") name = argv[++i];
  else if (argv[i] === "--call") call = { name: argv[++i], args: JSON.parse(argv[++i] || "{}") };
}
if (!url || !call) {
  console.error("usage: node legacy-sampling-client.mjs URL [--name NAME] --call TOOL JSON");
  process.exit(2);
}

const served = { sampling: 0 };
const client = new Client({ name, version: "1.0.0" }, { capabilities: { sampling: {} } });
client.setRequestHandler(CreateMessageRequestSchema, async () => {
  served.sampling++;
  return { role: "assistant", content: { type: "text", text: "a canned completion from the lab client" }, model: "lab-model", stopReason: "endTurn" };
});

// A server may register capability-dependent tools after initialization and say so with
// notifications/tools/list_changed: listing waits for that notification (bounded), not a clock.
let changed = () => {};
client.setNotificationHandler(ToolListChangedNotificationSchema, async () => changed());
async function listUntil(tool) {
  let tools = [];
  for (let i = 0; i < 5; i++) {
    const next = new Promise((resolve) => { changed = resolve; setTimeout(resolve, 10000).unref(); });
    tools = (await client.listTools()).tools.map((t) => t.name).sort();
    if (tools.includes(tool)) break;
    await next;
  }
  return tools;
}

try {
  await client.connect(new SSEClientTransport(new URL(url)));
  const tools = await listUntil(call.name);
  let out;
  try {
    const r = await client.callTool({ name: call.name, arguments: call.args }, undefined, { timeout: 20000 });
    out = { tool: call.name, is_error: !!r.isError, text: r.content?.map((c) => c.text).join("") };
  } catch (err) {
    out = { tool: call.name, error: { code: err?.code, message: String(err?.message), data: err?.data } };
  }
  console.log(JSON.stringify({ tools, call: out, served }));
  await client.close();
  process.exit(0);
} catch (err) {
  console.error(`mcp legacy sampling client: ${err?.stack || err}`);
  process.exit(1);
}
