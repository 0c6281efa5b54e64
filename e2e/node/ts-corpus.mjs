// The TypeScript SDK side of the issue 16 corpus differential: a tiny MCP server that answers a
// client's tools/call with one corpus item's exact bytes, and a real TS SDK client (Client over
// StreamableHTTPClientTransport, or SSEClientTransport for legacy items) that reports what it
// dispatched. Run directly, the report says what the SDK decodes and acts on; run through the
// appliance, the Go test (e2e/differential_ts_test.go) checks each of those messages was judged.
//
//   node ts-corpus.mjs serve HOST:PORT CORPUS.jsonl
//       serves every item: Streamable HTTP at /item/N (initialize answered normally with a
//       session id, notifications and responses 202, tools/call answered with item N's status,
//       content type and body), legacy HTTP+SSE at /legacy/N/sse (endpoint event, POSTs 202,
//       answers on the stream; tools/call answered with item N's raw event bytes, after which
//       the stream ends). Prints READY.
//   node ts-corpus.mjs client BASE_URL CORPUS.jsonl [--name CLIENT_NAME]
//       one fresh client per item (initialize is id 0, the tools/call id 1), with the sampling
//       capability and a handler that counts the requests it serves; prints one JSON line per
//       item: {name, transport, dispatched: [every message the transport handed to the
//       protocol layer after connect], sampling: N, call: {result | error}, end}.
//
// Corpus lines: {"name", "transport": "streamable"|"legacy", "status", "content_type",
// "body" | "body_b64", "events" | "events_b64", "why"}.
import fs from "node:fs";
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, where, corpusPath, ...rest] = process.argv.slice(2);
if (!mode || !where || !corpusPath) {
  console.error("usage: node ts-corpus.mjs serve HOST:PORT CORPUS | client BASE_URL CORPUS [--name NAME]");
  process.exit(2);
}
const items = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));

// bytesOf is an item's payload as the exact bytes to write (base64 when the item needs bytes
// that are not valid UTF-8).
function bytesOf(item, key) {
  if (item[key + "_b64"] !== undefined) return Buffer.from(item[key + "_b64"], "base64");
  return Buffer.from(item[key] ?? "", "utf8");
}

if (mode === "serve") serve();
else if (mode === "client") await runClients();
else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}

// ---- server ----

function serve() {
  const i = where.lastIndexOf(":");
  const host = where.slice(0, i).replace(/^\[|\]$/g, "");
  const port = Number(where.slice(i + 1));
  const streams = new Map(); // legacy item index -> the open GET response
  let sessions = 0;
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, "http://x");
    const m = url.pathname.match(/^\/(item|legacy)\/(\d+)(\/sse|\/message)?$/);
    const item = m ? items[Number(m[2])] : undefined;
    if (!item) return res.writeHead(404).end();
    const body = await readAll(req);
    if (m[1] === "item") return streamable(req, res, item, body);
    if (m[3] === "/sse" && req.method === "GET") {
      res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
      res.write(`event: endpoint\ndata: /legacy/${m[2]}/message?sessionId=s${++sessions}\n\n`);
      streams.set(m[2], res);
      res.on("close", () => streams.get(m[2]) === res && streams.delete(m[2]));
      return;
    }
    if (m[3] === "/message" && req.method === "POST") {
      const stream = streams.get(m[2]);
      res.writeHead(202).end("Accepted");
      const msg = parse(body);
      if (!stream || !msg) return;
      if (msg.method === "initialize") stream.write(`event: message\ndata: ${JSON.stringify(initResult(msg))}\n\n`);
      else if (msg.method === "tools/call") stream.end(bytesOf(item, "events"));
      return;
    }
    res.writeHead(405).end();
  });

  function streamable(req, res, item, body) {
    if (req.method !== "POST") return res.writeHead(405, { Allow: "POST" }).end();
    const msg = parse(body);
    if (msg && msg.method === "initialize") {
      const out = JSON.stringify(initResult(msg));
      return res.writeHead(200, { "Content-Type": "application/json", "Mcp-Session-Id": `s${++sessions}` }).end(out);
    }
    if (msg && msg.method === "tools/call") {
      // The item's bytes exactly, Content-Type as raw bytes (latin1: one byte per char).
      const headers = [];
      if (item.content_type !== undefined) headers.push(["Content-Type", Buffer.from(item.content_type, "utf8").toString("latin1")]);
      if (item.content_type_b64 !== undefined) headers.push(["Content-Type", Buffer.from(item.content_type_b64, "base64").toString("latin1")]);
      res.writeHead(item.status ?? 200, headers.flat());
      return res.end(item.transport === "streamable" && item.events !== undefined ? bytesOf(item, "events") : bytesOf(item, "body"));
    }
    return res.writeHead(202).end();
  }

  server.listen(port, host, () => console.error(`READY ${where} (${items.length} items)`));
}

function initResult(msg) {
  return {
    jsonrpc: "2.0",
    id: msg.id,
    result: { protocolVersion: msg.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "ts-corpus", version: "1.0.0" } },
  };
}

function parse(buf) {
  try {
    return JSON.parse(buf.toString("utf8"));
  } catch {
    return undefined;
  }
}

function readAll(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

// ---- client ----

async function runClients() {
  let name = "lab-agent-untrusted";
  for (let i = 0; i < rest.length; i++) if (rest[i] === "--name") name = rest[++i];
  for (let i = 0; i < items.length; i++) {
    const report = await runOne(i, items[i], name);
    console.log(JSON.stringify(report));
  }
  process.exit(0);
}

// ended is a promise and its resolver: the item is over (its answer read and dispatched, its
// stream ended, or the transport failed), whichever comes first.
function ended() {
  let resolve;
  const p = new Promise((r) => { resolve = r; });
  return { p, resolve };
}

// runOne connects a fresh client to item i, calls the tool the item answers and reports what the
// client dispatched.
async function runOne(i, item, name) {
  const report = { name: item.name, transport: item.transport, dispatched: [], sampling: 0, call: null, end: "", errors: [] };
  const done = ended();
  const finish = (why) => {
    if (!report.end) report.end = why;
    done.resolve();
  };
  const client = new Client({ name, version: "1.0.0" }, { capabilities: { sampling: {} } });
  client.setRequestHandler(CreateMessageRequestSchema, async () => {
    report.sampling++;
    return { role: "assistant", content: { type: "text", text: "a canned completion" }, model: "lab-model", stopReason: "endTurn" };
  });
  let calling = false;
  // The end of the tools/call answer's body (of the legacy stream, which the server ends after
  // the item's events) is the end of the item: its last events are dispatched in the microtasks
  // that follow the close, which all run before the next turn of the event loop (setImmediate).
  const watch = async (url, init) => {
    const resp = await fetch(url, init);
    const isCall = calling && init?.method === "POST" && String(init?.body ?? "").includes('"tools/call"');
    const isLegacyStream = item.transport === "legacy" && (init?.method ?? "GET") === "GET";
    if (!(isCall || isLegacyStream) || !resp.body) return resp;
    const reader = resp.body.getReader();
    const body = new ReadableStream({
      async pull(controller) {
        try {
          const { value, done: eof } = await reader.read();
          if (eof) {
            controller.close();
            setImmediate(() => setImmediate(() => finish("body-end")));
          } else controller.enqueue(value);
        } catch (err) {
          controller.error(err);
          setImmediate(() => setImmediate(() => finish("body-error")));
        }
      },
      cancel(reason) {
        reader.cancel(reason);
        setImmediate(() => setImmediate(() => finish("body-cancel")));
      },
    });
    return new Response(body, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
  };
  const base = where.replace(/\/$/, "");
  const transport = item.transport === "legacy"
    ? new SSEClientTransport(new URL(`${base}/legacy/${i}/sse`), { fetch: watch })
    : new StreamableHTTPClientTransport(new URL(`${base}/item/${i}`), { fetch: watch });
  const guard = setTimeout(() => finish("timeout"), 15000); // a hang guard, reported
  try {
    await client.connect(transport);
  } catch (err) {
    report.end = "connect-error";
    report.call = { error: String(err?.message ?? err) };
    clearTimeout(guard);
    await client.close().catch(() => {});
    return report;
  }
  const onmessage = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    report.dispatched.push(msg);
    onmessage?.(msg, extra);
  };
  const onerror = transport.onerror;
  transport.onerror = (err) => {
    // A message the transport could not decode (JSON.parse, the schema), or the stream's end.
    report.errors.push(String(err?.message ?? err).slice(0, 200));
    onerror?.(err);
  };
  calling = true;
  client
    .callTool({ name: "probe", arguments: {} }, undefined, { timeout: 15000 })
    .then((r) => { report.call = { result: r }; })
    .catch((err) => { report.call = { error: String(err?.message ?? err), code: err?.code, data: err?.data }; });
  await done.p;
  clearTimeout(guard);
  await client.close().catch(() => {});
  return report;
}
