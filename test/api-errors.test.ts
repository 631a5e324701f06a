// Bad input never crashes the server or gets a 5xx: every case gets OpenAI's error shape, the right status and
// our headers. Raw HTTP, because the SDK would refuse to send most of this.
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { ID_HEADERS, parseRawHeaders, rawExchange, request, type RawResponse } from './helpers/http.js';

const dataDir = tempDir(t);
const { secret } = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--region', 'sa-jeddah-1']);
const auth = { authorization: `Bearer ${secret}` };
const json = { ...auth, 'content-type': 'application/json' };
const chat = `${daemon.baseURL}/chat/completions`;

function expectError(t: Test, r: { status: number; headers: Record<string, unknown>; json?: any }, status: number, code: string) {
  t.equal(r.status, status, `status ${status}`);
  t.equal(r.json?.error?.code, code, `code ${code}`);
  t.type(r.json?.error?.message, 'string');
  t.ok('param' in (r.json?.error ?? {}), 'param is present');
  t.ok('type' in (r.json?.error ?? {}), 'type is present');
  t.equal(r.headers['x-region'], 'sa-jeddah-1');
  t.equal(r.headers['x-sovereign'], 'true');
  t.match(String(r.headers['x-request-id']), /^req_/);
  t.notMatch(JSON.stringify(r.json), /node_modules|at [A-Za-z]+ \(|\.js:\d+/, 'no stack trace');
}

const cases: Array<[string, () => Promise<RawResponse>, number, string]> = [
  [
    'malformed JSON',
    () => request(chat, { method: 'POST', headers: json, body: '{"model": "m", "messages": [' }),
    400,
    'invalid_request_error',
  ],
  ['trailing garbage', () => request(chat, { method: 'POST', headers: json, body: '{"model":"m"} x' }), 400, 'invalid_request_error'],
  ['empty body', () => request(chat, { method: 'POST', headers: json, body: '' }), 400, 'invalid_request_error'],
  ['JSON array instead of object', () => request(chat, { method: 'POST', headers: json, body: '[]' }), 400, 'invalid_request_error'],
  [
    'wrong type for temperature',
    () =>
      request(chat, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], temperature: '0.5' }),
      }),
    400,
    'invalid_request_error',
  ],
  [
    'messages not an array',
    () => request(chat, { method: 'POST', headers: json, body: JSON.stringify({ model: 'm', messages: 'hello' }) }),
    400,
    'invalid_request_error',
  ],
  [
    'missing messages',
    () => request(chat, { method: 'POST', headers: json, body: JSON.stringify({ model: 'm' }) }),
    400,
    'invalid_request_error',
  ],
  [
    'n above 1',
    () =>
      request(chat, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }], n: 3 }),
      }),
    400,
    'invalid_request_error',
  ],
  [
    'prototype poisoning',
    () => request(chat, { method: 'POST', headers: json, body: '{"model":"m","messages":[],"__proto__":{"admin":true}}' }),
    400,
    'invalid_request_error',
  ],
  [
    'invalid UTF-8',
    () =>
      request(chat, {
        method: 'POST',
        headers: json,
        body: Buffer.concat([Buffer.from('{"model":"'), Buffer.from([0xc3, 0x28, 0xff]), Buffer.from('","messages":[]}')]),
      }),
    400,
    'invalid_request_error',
  ],
  [
    '10 MB body',
    () =>
      request(chat, {
        method: 'POST',
        headers: json,
        body: `{"model":"m","messages":[{"role":"user","content":"${'a'.repeat(10 * 1024 * 1024)}"}]}`,
      }),
    413,
    'payload_too_large',
  ],
  [
    'text/plain body',
    () => request(chat, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'hello' }),
    415,
    'unsupported_media_type',
  ],
  [
    'form body',
    () => request(chat, { method: 'POST', headers: { ...auth, 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=b' }),
    415,
    'unsupported_media_type',
  ],
  ['unknown /v1 route', () => request(`${daemon.baseURL}/nothing-here`, { headers: auth }), 404, 'not_found'],
  ['unknown route outside /v1', () => request(`${daemon.origin}/admin.php`), 404, 'not_found'],
  ['wrong method', () => request(`${daemon.baseURL}/chat/completions`, { headers: auth }), 405, 'method_not_allowed'],
  ['bad percent-encoding in the URL', () => request(`${daemon.baseURL}/models/%zz`, { headers: auth }), 400, 'invalid_request_error'],
  [
    'model that is not served',
    () =>
      request(chat, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
      }),
    404,
    'model_not_found',
  ],
  [
    'unauthenticated body is not parsed first',
    () => request(chat, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{bad' }),
    401,
    'invalid_api_key',
  ],
];

for (const [name, send, status, code] of cases) {
  t.test(name, async (t) => expectError(t, await send(), status, code));
}

t.test('malformed HTTP that Node rejects before routing still gets our shape and headers', async (t) => {
  const raws: Array<[string, string, number]> = [
    ['control character in a header value', `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n`, 400],
    ['newline smuggled into a header', `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: b\rc\r\n\r\n`, 400],
    ['space in a header name', `GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n`, 400],
    ['garbage request line', `HELLO\r\n\r\n`, 400],
    ['oversized headers', `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`, 431],
  ];
  for (const [name, bytes, status] of raws) {
    const reply = parseRawHeaders(await rawExchange(daemon.origin, bytes));
    t.equal(reply.status, status, name);
    for (const h of ID_HEADERS) t.ok(reply.headers[h], `${name}: ${h}`);
    t.equal(JSON.parse(reply.body).error.type, 'invalid_request_error', `${name}: OpenAI shape`);
  }
});

t.test('the server is still healthy after all of that', async (t) => {
  const r = await request(`${daemon.baseURL}/models`, { headers: auth });
  t.equal(r.status, 200);
  t.equal(daemon.proc.exitCode, null, 'still running');
  t.notMatch(daemon.logs.join('\n'), secret, 'the key never appears in the logs');
});

t.test('a parameter with several accepted forms names them all', async (t) => {
  const r = await request(chat, {
    method: 'POST',
    headers: json,
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 5 }] }),
  });
  t.equal(r.status, 400);
  t.equal(r.json.error.param, 'messages[0].content');
  t.match(r.json.error.message, /expected string or array or null/);
});

t.test('a /v1 path no route serves is a /v1 call like any other: a key first, then an audit entry', async (t) => {
  // SPEC: a key on every /v1 request, and every authenticated call has an entry (X-Audit-Leaf).
  const anonymous = await request(`${daemon.baseURL}/no-route-here`);
  expectError(t, anonymous, 401, 'invalid_api_key');
  // The path is the client's text: a national ID written in it must not land in the log.
  const cases: Array<[string, string, number, string]> = [
    ['GET', `${daemon.baseURL}/no-route/1012345672`, 404, 'not_found'],
    ['PUT', `${daemon.baseURL}/chat/completions`, 405, 'method_not_allowed'],
  ];
  const leaves: Array<[string, number]> = [];
  for (const [method, url, status, code] of cases) {
    const r = await request(url, { method, headers: auth });
    expectError(t, r, status, code);
    t.match(r.headers['x-audit-leaf'], /^\d+$/, `${method} ${status}: X-Audit-Leaf`);
    leaves.push([String(r.headers['x-request-id']), Number(r.headers['x-audit-leaf'])]);
  }
  const out = `${dataDir}/unknown-route-export`;
  t.equal(cli(['audit', 'export', '--out', out, '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' }).code, 0);
  const entries = readFileSync(`${out}/entries.jsonl`, 'utf8').trim().split('\n');
  for (const [[requestId, leaf], [method, , status]] of leaves.map((l, i) => [l, cases[i]] as const)) {
    const entry = JSON.parse(entries[leaf]) as { request_id: string; method: string; status: number; route: string };
    t.match(entry, { request_id: requestId, method, status }, `${method} ${status}: its entry`);
  }
  t.notMatch(entries.join('\n'), /1012345672/, 'the path is not recorded');
});
