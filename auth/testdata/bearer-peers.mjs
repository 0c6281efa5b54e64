// Reads a JSON array of Authorization values (base64 of their bytes) on stdin and prints, for each,
// the token the TypeScript SDK's own requireBearerAuth middleware hands its verifier (base64 of its
// Latin-1 bytes), or null when it hands none. Node's HTTP parser gives header values as Latin-1
// strings, so that is how they are given to the middleware here.
// Usage: node bearer-peers.mjs <path of dist/esm/server/auth/middleware/bearerAuth.js>
import { pathToFileURL } from 'node:url';

const { requireBearerAuth } = await import(pathToFileURL(process.argv[2]).href);
let input = '';
for await (const chunk of process.stdin) input += chunk;
const values = JSON.parse(input);
const out = [];
for (const b64 of values) {
  let got = null;
  const verifier = {
    async verifyAccessToken(token) {
      got = token;
      return { token, clientId: 'differential', scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
    },
  };
  const mw = requireBearerAuth({ verifier });
  const req = { headers: { authorization: Buffer.from(b64, 'base64').toString('latin1') } };
  const res = { set() { return res; }, status() { return res; }, json() { return res; } };
  await mw(req, res, () => {});
  out.push(got === null ? null : Buffer.from(got, 'latin1').toString('base64'));
}
process.stdout.write(JSON.stringify(out));
