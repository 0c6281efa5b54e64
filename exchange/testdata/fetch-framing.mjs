// The Node fetch (undici) oracle of exchange's framing differential (framing_diff_test.go): fetches
// every URL it is given, one after the other in this one process, and prints one JSON line per URL:
//
//   {"i": N, "status": S, "body": BASE64, "ok": true}
//   {"i": N, "status": S, "body": BASE64, "error": "..."}   the body failed after BASE64 was delivered
//   {"i": N, "error": "..."}                                  fetch itself rejected (no response)
//
// body is every byte the response stream delivered to the application before it ended or failed:
// what a client could have acted on. Usage: node fetch-framing.mjs < urls.json (a JSON array).
import fs from "node:fs";

const urls = JSON.parse(fs.readFileSync(0, "utf8"));

// describe names an error by its cause (undici puts the parser's reason there).
function describe(e) {
  const c = e && e.cause ? e.cause : e;
  return String((c && (c.code || c.message)) || c);
}

for (let i = 0; i < urls.length; i++) {
  const out = { i };
  try {
    const res = await fetch(urls[i], { signal: AbortSignal.timeout(15000), redirect: "manual" });
    out.status = res.status;
    const chunks = [];
    try {
      if (res.body) {
        const reader = res.body.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          chunks.push(Buffer.from(value));
        }
      }
      out.ok = true;
    } catch (e) {
      out.error = describe(e);
    }
    out.body = Buffer.concat(chunks).toString("base64");
  } catch (e) {
    out.error = describe(e);
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
