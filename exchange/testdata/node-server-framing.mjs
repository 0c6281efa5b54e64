// The Node HTTP server (llhttp) oracle of exchange's request framing differential
// (framing_diff_test.go): Node MCP servers (the TypeScript SDK's, server-everything) read requests
// with this parser. It listens on 127.0.0.1 and prints "PORT n", then one JSON line per request it
// dispatched to the application, as soon as that request's body ended or failed:
//
//   {"port": P, "seq": N, "method": M, "url": U, "body": BASE64, "complete": true|false}
//
// port is the client's port (the test keeps every connection open until stdin closes, so a port
// names one connection), seq counts the requests of a connection from 0, body is every byte the
// application was given. A request the parser refuses before dispatching it is not printed (Node
// answers it 400 itself). Once a connection has closed and everything about it was printed:
//
//   {"port": P, "closed": true}
//
// Ends when stdin closes.
import http from "node:http";

const seqs = new WeakMap();
const server = http.createServer((req, res) => {
  const seq = seqs.get(req.socket) ?? 0;
  seqs.set(req.socket, seq + 1);
  const port = req.socket.remotePort;
  const chunks = [];
  let printed = false;
  const print = (complete) => {
    if (printed) return;
    printed = true;
    process.stdout.write(JSON.stringify({ port, seq, method: req.method, url: req.url, body: Buffer.concat(chunks).toString("base64"), complete }) + "\n");
  };
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    print(true);
    res.writeHead(200, { "Content-Length": 2 });
    res.end("ok");
  });
  req.on("error", () => print(false));
  req.on("close", () => print(req.complete));
});
server.on("connection", (socket) => {
  const port = socket.remotePort;
  // After the requests' own close events, which run in the ticks that follow the socket's.
  socket.on("close", () => setImmediate(() => process.stdout.write(JSON.stringify({ port, closed: true }) + "\n")));
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`PORT ${server.address().port}\n`);
});
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
