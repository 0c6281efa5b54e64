// A real MCP server from the official TypeScript SDK (McpServer + StreamableHTTPServerTransport,
// stateless: a fresh server and transport per request, as the SDK's stateless example does), so
// that the e2e differential tests can ask the SDK itself which request spellings it accepts and
// acts on (issue 16 case 5: it trims a Content-Type with String.prototype.trim, which removes
// every Unicode space, and its TextDecoder strips a UTF-8 BOM before JSON.parse).
//
//   node ts-server.mjs HOST:PORT
//
// Tool: denied_delete (the lab's rules deny denied_*; it writes "TOOLRUN denied_delete id=ID" on
// stderr when it runs, so a test sees whether a call reached it).
// GET /mark?X logs "MARK X" (see below). Every POST is logged as "POST content-type=JSON
// status=N" on stderr. Prints READY when listening.
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";

const listen = process.argv[2];
if (!listen) {
  console.error("usage: node ts-server.mjs HOST:PORT");
  process.exit(2);
}
const i = listen.lastIndexOf(":");
const host = listen.slice(0, i).replace(/^\[|\]$/g, "");
const port = Number(listen.slice(i + 1));

// newServer is one stateless MCP server with the lab's tools.
function newServer() {
  const server = new McpServer({ name: "mcpintercept-lab-ts-server", version: "1.0.0" });
  server.registerTool(
    "denied_delete",
    { description: "deletes a path (the lab's rules deny it)" },
    async (extra) => {
      console.error(`TOOLRUN denied_delete id=${JSON.stringify(extra.requestId)}`);
      return { content: [{ type: "text", text: "deleted" }] };
    },
  );
  return server;
}

const httpServer = http.createServer(async (req, res) => {
  // A test's marker: once "MARK x" is in the log, so is every line of the requests answered
  // before it (the log is written in order), so absence of a TOOLRUN line can be asserted.
  if (req.url.startsWith("/mark?")) {
    console.error(`MARK ${req.url.slice(6)}`);
    res.writeHead(204).end();
    return;
  }
  res.on("finish", () => {
    if (req.method === "POST") {
      console.error(`POST content-type=${JSON.stringify(req.headers["content-type"] ?? null)} status=${res.statusCode}`);
    }
  });
  const server = newServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  try {
    await server.connect(transport);
    await transport.handleRequest(req, res);
  } catch (err) {
    console.error(`ts-server: ${err?.stack || err}`);
    if (!res.headersSent) {
      res.writeHead(500).end();
    }
  }
});
httpServer.listen(port, host, () => console.error(`READY ${listen}`));
