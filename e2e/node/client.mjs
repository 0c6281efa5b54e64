// A real MCP client from the official TypeScript SDK (StreamableHTTPClientTransport), unmodified
// apart from its command line: it connects to the URL it is given, lists tools, calls echo (and
// add/get-sum when the server has it), and prints a deterministic JSON summary. The lab runs it in
// mcpi-client against the server's own address; it never knows an appliance is in the path.
//
//   node client.mjs URL            (HTTPS trust via NODE_EXTRA_CA_CERTS, as any Node program)
//   node client.mjs URL --progress N
//                                  call trigger-long-running-operation (server-everything) with N
//                                  steps and print how many progress notifications arrived
//   node client.mjs URL --call TOOL JSON
//                                  call one tool and print {tool, is_error, text, error}
//   node client.mjs URL --list-call TOOL JSON
//                                  list the tools first (in the same session), then call one tool;
//                                  prints {tools, call: {tool, is_error, text, error}}
//   --call and --list-call take more TOOL JSON pairs: each is called in turn in the same session,
//                                  one line printed per call (the demo saves a Node start-up each)
//   --all-pages (anywhere)         list every page of tools (follow nextCursor until the server
//                                  sends none); without it only the first page is listed, as
//                                  client.listTools() does. The summary then also has "pages".
//   --sse (anywhere)               use the legacy HTTP+SSE transport (protocol 2024-11-05 style:
//                                  GET the stream, POST to the endpoint it announces)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";

const legacy = process.argv.includes("--sse");
const allPages = process.argv.includes("--all-pages");
const argv = process.argv.filter((a) => a !== "--sse" && a !== "--all-pages");
const url = argv[2];
if (!url) {
  console.error("usage: node client.mjs URL [--sse] [--progress N | --call TOOL JSON]");
  process.exit(2);
}

const progressSteps = argv[3] === "--progress" ? Number(argv[4]) : 0;
const callTools = [];
if (argv[3] === "--call" || argv[3] === "--list-call") {
  for (let i = 4; i < argv.length || i === 4; i += 2) {
    callTools.push({ name: argv[i], args: JSON.parse(argv[i + 1] || "{}") });
  }
}
const callTool = callTools[0] || null;
const listFirst = argv[3] === "--list-call";

// listTools lists the first page, or with --all-pages every page (bounded, in case a cursor
// loops), and counts the pages.
let pages = 0;
async function listTools() {
  const tools = [];
  let cursor;
  do {
    const r = await client.listTools(cursor === undefined ? undefined : { cursor });
    pages++;
    tools.push(...r.tools);
    cursor = allPages ? r.nextCursor : undefined;
  } while (cursor !== undefined && pages < 1000);
  return { tools };
}

const client = new Client({ name: "mcpintercept-lab-node-client", version: "1.0.0" });
const transport = legacy ? new SSEClientTransport(new URL(url)) : new StreamableHTTPClientTransport(new URL(url));
try {
  await client.connect(transport);
  if (callTool) {
    let tools;
    if (listFirst) {
      tools = (await listTools()).tools.map((t) => t.name).sort();
    }
    for (const ct of callTools) {
      let out;
      try {
        const r = await client.callTool({ name: ct.name, arguments: ct.args }, undefined, { timeout: 15000 });
        out = { tool: ct.name, is_error: !!r.isError, text: r.content?.map((c) => c.text).join("") };
      } catch (err) {
        // A JSON-RPC error from the server (or from an intermediary that names itself in data).
        out = { tool: ct.name, error: { code: err?.code, message: String(err?.message), data: err?.data } };
      }
      console.log(JSON.stringify(listFirst ? { tools, call: out } : out));
    }
    await client.close();
    process.exit(0);
  }
  if (progressSteps > 0) {
    let seen = 0;
    const r = await client.callTool(
      { name: "trigger-long-running-operation", arguments: { duration: progressSteps * 0.2, steps: progressSteps } },
      undefined,
      { onprogress: () => { seen++; }, timeout: 30000 },
    );
    console.log(JSON.stringify({ progress: seen, text: r.content?.map((c) => c.text).join("") }));
    await client.close();
    process.exit(0);
  }
  const { tools } = await listTools();
  const names = tools.map((t) => t.name).sort();
  const calls = [];
  const echo = tools.find((t) => t.name === "echo");
  if (echo) {
    const key = echo.inputSchema?.properties?.message ? "message" : "text";
    const r = await client.callTool({ name: "echo", arguments: { [key]: "hello through the network" } });
    calls.push({ tool: "echo", text: r.content?.map((c) => c.text).join("") });
  }
  for (const name of ["add", "get-sum"]) {
    if (names.includes(name)) {
      const r = await client.callTool({ name, arguments: { a: 2, b: 3 } });
      calls.push({ tool: name, text: r.content?.map((c) => c.text).join("") });
    }
  }
  const info = client.getServerVersion();
  const summary = { server: info?.name, tools: names, calls };
  if (allPages) summary.pages = pages;
  console.log(JSON.stringify(summary, null, 2));
  await client.close();
} catch (err) {
  console.error(`mcp client: ${err?.stack || err}`);
  process.exit(1);
}
