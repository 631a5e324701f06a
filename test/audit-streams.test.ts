// Streams in the audit log, through the real daemon (software signer) and a slow OpenAI-shaped upstream on loopback:
// a stream's start entry is on disk before its first byte and its end entry names it; a stream cut off by kill -9
// leaves its start without an end, which the offline verifier reports (without failing) after a restart and an
// export. Also: the verifier's code (the dashboard runs the same in the page) takes entries of every kind, and a call
// naming a model that does not exist records the name it asked for, scrubbed.
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { Checkpointer } from '../daemon/audit/checkpoint.js';
import { AuditLog, SoftwareSigner } from '../daemon/audit/index.js';
import { exportAnchors } from '../daemon/audit/export.js';
import { openStore } from '../daemon/store/index.js';
import { cli, createKey, startDaemon, tempDir, waitForModels, type RunningDaemon } from './helpers/daemon.js';

const VERIFIER = resolve(import.meta.dirname, '..', 'tools', 'verify-anchors.mjs');
const NATIONAL_ID = '1012345672';

function verifyTool(args: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, [VERIFIER, ...args], { encoding: 'utf8', env: {} });
  return { code: r.status, out: r.stdout + r.stderr };
}

/**
 * An OpenAI-shaped upstream that streams a word every 50 ms: three words and the end for 'short', and for anything
 * else until the connection goes (at most 30 s).
 */
const upstream = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'slow-model', object: 'model', created: 1, owned_by: 'x' }] }));
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { messages: Array<{ content: string }> };
    const short = body.messages.at(-1)?.content === 'short';
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'u', object: 'chat.completion.chunk', created: 1, model: 'slow-model', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk({ role: 'assistant', content: '' }));
    let words = 0;
    const timer = setInterval(() => {
      if ((short && words === 3) || words === 600) {
        clearInterval(timer);
        res.write(chunk({}, 'stop'));
        res.write(
          `data: ${JSON.stringify({ id: 'u', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 1, completion_tokens: words, total_tokens: words + 1 } })}\n\n`,
        );
        res.end('data: [DONE]\n\n');
        return;
      }
      res.write(chunk({ content: `word${words++} ` }));
    }, 50);
    res.on('close', () => clearInterval(timer));
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => new Promise<void>((resolve) => upstream.close(() => resolve())));
const upstreamBase = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1`;

function configFile(dir: string): string {
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({
      region: 'sa-riyadh-1',
      audit: { checkpointMs: 250 },
      upstreams: [{ name: 'slow', baseUrl: upstreamBase, models: [{ id: 'slow-chat', upstreamModel: 'slow-model', capability: 'chat' }] }],
    }),
  );
  return file;
}

/** Exports the log (as the CLI does, beside the running daemon) until `ready` holds for its entries. */
async function exportUntil(t: Test, dataDir: string, ready: (entries: Array<Record<string, unknown>>) => boolean): Promise<void> {
  for (const until = Date.now() + 15_000; ;) {
    const out = tempDir(t);
    const r = cli(['audit', 'export', '--data-dir', dataDir, '--out', out]);
    if (r.code !== 0) throw new Error(r.stderr);
    const text = readFileSync(join(out, 'entries.jsonl'), 'utf8').trimEnd();
    if (ready(text ? text.split('\n').map((l) => JSON.parse(l) as Record<string, unknown>) : [])) return;
    if (Date.now() > until) throw new Error('the export never got there');
    await new Promise((r) => setTimeout(r, 300));
  }
}

async function checkpointCovering(d: RunningDaemon, secret: string, size: number): Promise<void> {
  for (const until = Date.now() + 15_000; ;) {
    const res = await fetch(`${d.baseURL}/audit/anchors?limit=1`, { headers: { authorization: `Bearer ${secret}` } });
    const json = (await res.json()) as { checkpoints?: Array<{ size: number }> };
    if ((json.checkpoints?.[0]?.size ?? 0) >= size) return;
    if (Date.now() > until) throw new Error(`no checkpoint covers ${size} entries: ${JSON.stringify(json)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const chatBody = (content: string, model = 'slow-chat') => JSON.stringify({ model, messages: [{ role: 'user', content }], stream: true });

t.test('a stream cut off by kill -9 leaves its start without an end; the verifier reports it, and pairs the others', async (t) => {
  const dataDir = tempDir(t);
  const config = configFile(dataDir);
  const { secret } = createKey(dataDir, 'acme');
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
  await waitForModels(d.baseURL, secret, ['slow-chat']);
  const headers = { authorization: `Bearer ${secret}`, 'content-type': 'application/json' };

  // A whole stream, through the OpenAI client.
  const client = new OpenAI({ apiKey: secret, baseURL: d.baseURL, maxRetries: 0 });
  const { data: stream, response } = await client.chat.completions
    .create({ model: 'slow-chat', messages: [{ role: 'user', content: 'short' }], stream: true })
    .withResponse();
  let answer = '';
  for await (const part of stream) answer += part.choices[0]?.delta.content ?? '';
  t.equal(answer, 'word0 word1 word2 ', 'the whole stream arrived');
  const wholeId = response.headers.get('x-request-id')!;

  // A client that leaves right after the first bytes: its stream ends there, and its end entry says so.
  const leaving = new AbortController();
  const left = await fetch(`${d.baseURL}/chat/completions`, { method: 'POST', headers, body: chatBody('go on'), signal: leaving.signal });
  const leftId = left.headers.get('x-request-id')!;
  await left.body!.getReader().read();
  leaving.abort();
  await exportUntil(t, dataDir, (entries) => entries.some((e) => e.kind === 'call' && e.request_id === leftId));

  // Streams the daemon dies in the middle of: killed once each has sent its first words.
  const cut = await Promise.all(
    [1, 2, 3].map(async () => {
      const res = await fetch(`${d.baseURL}/chat/completions`, { method: 'POST', headers, body: chatBody('go on') });
      t.equal(res.status, 200);
      const reader = res.body!.getReader();
      let received = '';
      const contentEvents = () => received.match(/"delta":\{"content":"[^"]/g)?.length ?? 0;
      while (contentEvents() < 3) {
        const r = await reader.read();
        if (r.done) break;
        received += new TextDecoder().decode(r.value);
      }
      t.notMatch(received, /\[DONE\]/, 'the stream was under way');
      return { id: res.headers.get('x-request-id')!, reader };
    }),
  );
  d.proc.kill('SIGKILL');
  await d.exited;
  for (const { reader } of cut) await reader.read().catch(() => {});

  const again = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
  // What the first daemon wrote (its stream's start among it), and the health call below.
  const health = await fetch(`${again.baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } });
  const size = Number(health.headers.get('x-audit-leaf')) + 1;
  await health.text();
  await checkpointCovering(again, secret, size);
  const work = tempDir(t);
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', work]).code, 0);
  const entries = readFileSync(join(work, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const leafOf = (kind: string, requestId: string) => entries.findIndex((e) => e.kind === kind && e.request_id === requestId);

  const wholeStart = leafOf('stream.start', wholeId);
  const wholeEnd = leafOf('call', wholeId);
  t.ok(wholeStart >= 0 && wholeEnd > wholeStart, 'the whole stream has its start, then its end');
  t.match(entries[wholeStart], {
    kind: 'stream.start',
    v: 1,
    key: String,
    project: String,
    route: '/v1/chat/completions',
    model: 'slow-chat',
    request_sha256: /^[0-9a-f]{64}$/,
    time: String,
    region: 'sa-riyadh-1',
  });
  t.match(entries[wholeEnd], { kind: 'call', v: 3, stream_start: wholeStart, status: 200 }, 'its end entry names its start');
  const leftStart = leafOf('stream.start', leftId);
  t.match(entries[leafOf('call', leftId)], { stream_start: leftStart, status: 200 }, 'the stream its client left has its end entry');
  const cutStarts = cut.map(({ id }) => leafOf('stream.start', id));
  t.ok(
    cutStarts.every((leaf) => leaf >= 0),
    'each cut-off stream has its start entry',
  );
  t.same(
    cut.map(({ id }) => leafOf('call', id)),
    [-1, -1, -1],
    'and no end entry',
  );

  const r = verifyTool(['--key', join(work, 'public-key.pem'), '--export', work]);
  t.equal(r.code, 0, `the log verifies: a cut-off stream is no tampering\n${r.out}`);
  t.match(r.out, /VERIFIED/);
  const reported = r.out.split('\n').filter((l) => l.startsWith('stream cut off'));
  t.same(
    reported.sort(),
    cut
      .map(({ id }, i) => `stream cut off: leaf ${cutStarts[i]} (${id}), started ${String(entries[cutStarts[i]].time)}, no end entry`)
      .sort(),
    'the verifier names the cut-off streams, and only them',
  );
  t.match(r.out, /ok: 5 streams started; 2 of them have their end entry/);
  const onAppliance = cli(['audit', 'verify', '--data-dir', dataDir, '--key', join(work, 'public-key.pem')]);
  t.equal(onAppliance.code, 0, onAppliance.stdout + onAppliance.stderr);
  for (const [i, { id }] of cut.entries())
    t.match(onAppliance.stdout, `stream cut off: leaf ${cutStarts[i]} (${id})`, 'sovereign audit verify reports it too');
});

t.test('a call naming a model that does not exist records the name it asked for, with an ID in it scrubbed and cut to 256', async (t) => {
  const dataDir = tempDir(t);
  const { secret } = createKey(dataDir, 'acme');
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', configFile(dataDir)]);
  const headers = { authorization: `Bearer ${secret}`, 'content-type': 'application/json' };
  const send = async (model: unknown) => {
    const res = await fetch(`${d.baseURL}/chat/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    return { status: res.status, leaf: Number(res.headers.get('x-audit-leaf')) };
  };
  const plain = await send('gpt-4o-mini');
  const withId = await send(`model-${NATIONAL_ID}`);
  const long = await send(`${'m'.repeat(250)}-${NATIONAL_ID}-${'x'.repeat(300)}`);
  const notString = await send(42);
  t.equal(plain.status, 404);
  t.equal(long.status, 400, 'a name past 256 characters is refused');
  t.equal(notString.status, 400);
  await checkpointCovering(d, secret, notString.leaf + 1);
  const work = tempDir(t);
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', work]).code, 0);
  const text = readFileSync(join(work, 'entries.jsonl'), 'utf8');
  const entries = text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as { model: unknown });
  t.equal(entries[plain.leaf].model, 'gpt-4o-mini', 'the name it asked for');
  t.equal(entries[withId.leaf].model, 'model-[NATIONAL_ID]', 'an ID in it is recorded as its placeholder');
  t.equal(entries[long.leaf].model, `${'m'.repeat(250)}-[NATI`, 'a long name: its first 256 characters, scrubbed whole first');
  t.equal(entries[notString.leaf].model, null, 'a model that is not a string is not recorded');
  t.notMatch(text, NATIONAL_ID, 'the ID is nowhere in the log');
});

t.test("the verifier's code (the dashboard's in-page check) takes entries of every kind, known or not", async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  t.teardown(() => store.close());
  const log = AuditLog.open(store, { journalDir: dir });
  const kinds = [
    { project: 'p', request_id: 'req_1', status: 200, v: 1 }, // a call from before kinds
    { kind: 'stream.start', v: 1, request_id: 'req_2', time: '2026-11-28T00:00:00.000Z' },
    { kind: 'call', v: 3, request_id: 'req_2', stream_start: 1 },
    { kind: 'stream.start', v: 1, request_id: 'req_3', time: '2026-11-28T00:00:01.000Z' },
    { kind: 'boot', v: 1, version: '0.1.0', config_sha256: 'ab' },
    { kind: 'admin', v: 1, action: 'keys.revoke', object: { key: 'key_x' }, by: 'user_y' },
    { kind: 'egress.refused', v: 1, count: 3, note: 'a "stream_start" in a string is not a field' },
    { kind: 'a.kind.from.the.future', v: 9, nested: { deep: [1, { stream_start: 3 }] } },
  ];
  for (const entry of kinds) await log.append(entry);
  await log.settled();
  const signer = new SoftwareSigner(join(dir, 'key.pem'));
  const silent = { error() {}, warn() {}, info() {}, debug() {} } as unknown as ConstructorParameters<typeof Checkpointer>[3]['log'];
  const checkpoints = new Checkpointer(store, log, signer, {
    origin: 'sovereign/test',
    intervalMs: 60_000,
    heartbeatMs: 60_000,
    log: silent,
  });
  await checkpoints.checkpoint();
  const { anchors } = exportAnchors(store, log, 'sovereign/test');
  const entries = Array.from({ length: log.size }, (_, i) => new Uint8Array(log.entry(i)!));
  await log.close();

  const { verify } = (await import(VERIFIER)) as {
    verify: (input: { keyPems: string[]; anchors: unknown; entries: Uint8Array[] }) => Promise<{ lines: string[] }>;
  };
  const { lines } = await verify({ keyPems: [signer.publicKeyPem], anchors, entries });
  t.match(lines.join('\n'), /8 entries: every checkpoint's root recomputed/);
  t.same(
    lines.filter((l) => l.startsWith('stream cut off')),
    ['stream cut off: leaf 3 (req_3), started 2026-11-28T00:00:01.000Z, no end entry'],
    'one stream without its end; a stream_start nested deep in another kind ends nothing',
  );
  t.ok(lines.includes('2 streams started; 1 of them have their end entry'));
});
