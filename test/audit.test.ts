// The audit trail through the running daemon (software signer here; test/audit-tpm.test.ts signs with a real
// swtpm): every authenticated call gets a leaf before its response, receipts and anchors verify with the offline
// script and with openssl alone, tampering of every kind is caught, and a kill -9 under load loses no call that got
// a response.
import { spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { copyFileSync, cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { cli, createKey, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';

const ROOT = resolve(import.meta.dirname, '..');
const VERIFIER = join(ROOT, 'tools', 'verify-anchors.mjs');
const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

function verifyTool(args: string[]): { code: number | null; out: string } {
  const r = spawnSync(process.execPath, [VERIFIER, ...args], { encoding: 'utf8', env: {} });
  return { code: r.status, out: r.stdout + r.stderr };
}

/** A TPMS_ATTEST quote structure carrying `text`'s digest and a clock, as a TPM would make it. */
function fakeQuote(text: string, clock: bigint, resetCount: number): Buffer {
  const b = Buffer.alloc(4 + 2 + 2 + 2 + 32 + 17 + 8);
  b.writeUInt32BE(0xff544347, 0);
  b.writeUInt16BE(0x8018, 4);
  b.writeUInt16BE(0, 6); // qualifiedSigner: empty
  b.writeUInt16BE(32, 8);
  createHash('sha256').update(text).digest().copy(b, 10);
  b.writeBigUInt64BE(clock, 42);
  b.writeUInt32BE(resetCount, 50);
  b.writeUInt32BE(0, 54);
  b[58] = 1;
  return b;
}

/** A config file that makes checkpoints frequent, so tests do not wait long for one. */
function fastCheckpoints(dir: string): string {
  const file = join(dir, 'config.json');
  writeFileSync(file, JSON.stringify({ region: 'sa-riyadh-1', audit: { checkpointMs: 250 } }));
  return file;
}

async function anchors(d: RunningDaemon, secret: string, query = ''): Promise<any> {
  const res = await fetch(`${d.baseURL}/audit/anchors${query}`, { headers: { authorization: `Bearer ${secret}` } });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

/** Waits (bounded) until a signed checkpoint covers `size` entries. */
async function checkpointCovering(d: RunningDaemon, secret: string, size: number): Promise<any> {
  const until = Date.now() + 15_000;
  for (;;) {
    const { json } = await anchors(d, secret, '?limit=1');
    if (json.checkpoints?.[0]?.size >= size) return json;
    if (Date.now() > until) throw new Error(`no checkpoint covers ${size} entries: ${JSON.stringify(json)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('calls get leaves; receipts, anchors and exports verify offline and with openssl; tampering is caught', async (t) => {
  const dataDir = tempDir(t);
  const config = fastCheckpoints(dataDir);
  const { secret } = createKey(dataDir, 'acme');
  const other = createKey(dataDir, 'globex');
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
  const client = new OpenAI({ apiKey: secret, baseURL: d.baseURL, maxRetries: 0 });

  const { response } = await client.models.list().withResponse();
  // The log holds the keys' creation and the boot entry before any call: leaves are read from the headers.
  const firstLeaf = Number(response.headers.get('x-audit-leaf'));
  t.ok(firstLeaf >= 3, `the first call (leaf ${firstLeaf}) follows the boot entry`);
  const listed = await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  const listedBody = await listed.text();
  const listedLeaf = Number(listed.headers.get('x-audit-leaf'));
  t.ok(listedLeaf > firstLeaf, 'leaves grow with each call');

  const body = JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: `id ${'1012345672'}` }] });
  const refused = await fetch(`${d.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body,
  });
  t.equal(refused.status, 404);
  const refusedLeaf = Number(refused.headers.get('x-audit-leaf'));
  t.ok(refusedLeaf > listedLeaf, 'an authenticated call that fails is logged too');
  const unauthenticated = await fetch(`${d.baseURL}/models`, { headers: { authorization: 'Bearer sk-sov-nope' } });
  t.equal(unauthenticated.status, 401);
  t.equal(unauthenticated.headers.get('x-audit-leaf'), null, 'a call without a valid key is not');
  const otherCall = await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${other.secret}` } });

  await checkpointCovering(d, secret, Number(otherCall.headers.get('x-audit-leaf')) + 1);
  const receipt = await anchors(d, secret, `?leaf=${refusedLeaf}`);
  t.equal(receipt.status, 200);
  t.match(receipt.json.entry, {
    kind: 'call',
    v: 3,
    model: 'no-such-model',
    method: 'POST',
    route: '/v1/chat/completions',
    status: 404,
    region: 'sa-riyadh-1',
    request_id: refused.headers.get('x-request-id'),
    request_sha256: sha256(body),
    response_sha256: sha256(await refused.text()),
  });
  t.notMatch(receipt.json.entry_canonical, /1012345672/, 'no prompt text in the log');
  const listedReceipt = await anchors(d, secret, `?leaf=${listedLeaf}`);
  t.equal(listedReceipt.json.entry.response_sha256, sha256(listedBody), 'the digest of the body the client received');
  const foreign = await anchors(d, other.secret, `?leaf=${refusedLeaf}`);
  t.equal(foreign.status, 404, "another project's entry is not shown");
  t.equal(foreign.json.error.code, 'not_found');
  t.equal((await anchors(d, secret, '?leaf=999999')).status, 404);
  t.equal((await anchors(d, secret, '?limit=0')).status, 400);
  t.equal((await anchors(d, secret, '?leaf=abc')).status, 400);

  const work = tempDir(t);
  writeFileSync(join(work, 'receipt.json'), JSON.stringify(receipt.json));
  writeFileSync(join(work, 'key.pem'), receipt.json.public_key);
  const viaReceipt = verifyTool(['--key', join(work, 'key.pem'), '--receipt', join(work, 'receipt.json')]);
  t.equal(viaReceipt.code, 0, viaReceipt.out);
  t.match(viaReceipt.out, new RegExp(`entry ${refusedLeaf}: included in checkpoint`));
  t.equal(
    verifyTool(['--key', join(work, 'key.pem'), '--receipt', join(work, 'receipt.json'), '--require-tpm']).code,
    1,
    'a software key is not a TPM',
  );

  const page = await anchors(d, secret);
  writeFileSync(join(work, 'anchors.json'), JSON.stringify(page.json));
  const viaAnchors = verifyTool(['--key', join(work, 'key.pem'), '--anchors', join(work, 'anchors.json')]);
  t.equal(viaAnchors.code, 0, viaAnchors.out);
  t.match(viaAnchors.out, /signed by a software key/);

  // openssl alone checks a checkpoint: the note text (up to the blank line) and the DER signature after the key ID.
  const note: string = page.json.checkpoints[0].note;
  writeFileSync(join(work, 'note.txt'), note.slice(0, note.indexOf('\n\n') + 1));
  writeFileSync(join(work, 'sig.der'), Buffer.from(note.trimEnd().split(' ').at(-1)!, 'base64').subarray(4));
  const openssl = spawnSync(
    'openssl',
    ['dgst', '-sha256', '-verify', join(work, 'key.pem'), '-signature', join(work, 'sig.der'), join(work, 'note.txt')],
    {
      encoding: 'utf8',
    },
  );
  t.match(openssl.stdout, /Verified OK/, openssl.stderr);

  // The export and the CLI's own verify.
  const exported = join(work, 'export');
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', exported]).code, 0);
  const state = join(work, 'state.json');
  const first = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', exported, '--state', state]);
  t.equal(first.code, 0, first.out);
  t.match(first.out, /entries: every checkpoint's root recomputed/);
  // With no key file, the software key's public half is trusted, and nothing is left behind for it.
  const ownTmp = join(work, 'own-tmp');
  mkdirSync(ownTmp);
  const own = cli(['audit', 'verify', '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software', TMPDIR: ownTmp });
  t.equal(own.code, 0, own.stdout + own.stderr);
  t.match(own.stdout, /trusting the public half of \S+audit-signing-key\.pem/);
  t.match(own.stdout, /VERIFIED/);
  t.same(readdirSync(ownTmp), [], 'audit verify leaves nothing in the temporary directory');
  const earlier = join(work, 'earlier');
  cpSync(exported, earlier, { recursive: true });

  const tampered = (name: string, change: (dir: string) => void, expected: RegExp) => {
    const dir = join(work, name);
    cpSync(exported, dir, { recursive: true });
    change(dir);
    const r = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', dir]);
    t.equal(r.code, 1, `${name} is caught`);
    t.match(r.out, expected, name);
  };
  const editLines = (dir: string, edit: (lines: string[]) => string[]) => {
    const file = join(dir, 'entries.jsonl');
    const lines = readFileSync(file, 'utf8').trimEnd().split('\n');
    writeFileSync(file, `${edit(lines).join('\n')}\n`);
  };
  tampered(
    'an entry changed',
    (dir) => editLines(dir, (l) => l.map((x, i) => (i === refusedLeaf ? x.replace('"status":404', '"status":200') : x))),
    /do not hash to checkpoint/,
  );
  tampered('an entry removed', (dir) => editLines(dir, (l) => l.filter((_, i) => i !== 1)), /(do not hash|entries are missing)/);
  tampered(
    'a checkpoint re-signed by another key',
    (dir) => {
      const file = join(dir, 'anchors.json');
      const doc = JSON.parse(readFileSync(file, 'utf8'));
      const last = doc.checkpoints.at(-1);
      const text = last.note.slice(0, last.note.indexOf('\n\n') + 1);
      const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const keyId = Buffer.from(last.note.trimEnd().split(' ').at(-1), 'base64').subarray(0, 4);
      const forged = Buffer.concat([keyId, sign('sha256', Buffer.from(text), privateKey)]).toString('base64');
      last.note = `${text}\n\u2014 ${text.split('\n')[0]} ${forged}\n`;
      writeFileSync(file, JSON.stringify(doc));
    },
    /signature does not verify/,
  );

  // A receipt whose readable entry was edited (its hashed bytes left alone) is refused.
  const edited = { ...receipt.json, entry: { ...receipt.json.entry, status: 200 } };
  writeFileSync(join(work, 'edited.json'), JSON.stringify(edited));
  const editedCheck = verifyTool(['--key', join(work, 'key.pem'), '--receipt', join(work, 'edited.json')]);
  t.equal(editedCheck.code, 1);
  t.match(editedCheck.out, /the entry shown differs from the bytes that were logged/);
  // An entry added after the newest checkpoint is not passed off as verified.
  const appended = join(work, 'appended');
  cpSync(exported, appended, { recursive: true });
  writeFileSync(join(appended, 'entries.jsonl'), `${readFileSync(join(appended, 'entries.jsonl'), 'utf8')}{"forged":true}\n`);
  const appendedCheck = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', appended]);
  t.match(appendedCheck.out, /NOT VERIFIED: the 1 entries after checkpoint \d+ are not covered/);
  // audit verify trusts key files, not the keys in the data: another key fails.
  const stranger = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  writeFileSync(join(work, 'stranger.pem'), stranger.publicKey.export({ type: 'spki', format: 'pem' }));
  const wrongKey = cli(['audit', 'verify', '--data-dir', dataDir, '--key', join(work, 'stranger.pem')]);
  t.equal(wrongKey.code, 1);
  t.match(wrongKey.stdout, /FAILED: the log is signed now by key \w+, which is not among the trusted keys/);
  const missingKey = cli(['audit', 'verify', '--data-dir', dataDir, '--key', join(work, 'no-such-key.pem')]);
  t.equal(missingKey.code, 2, 'a --key file that cannot be read is a usage error');
  t.match(missingKey.stderr, /cannot read the public key \S+no-such-key\.pem \(ENOENT\)/);

  // The TPM-clock rule, with an attestation key of our own standing in for the TPM's (the real one is exercised in
  // audit-tpm.test.ts): quotes whose clock goes forward pass, a clock that goes back without a reset fails.
  const ak = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  writeFileSync(join(work, 'ak.pem'), ak.publicKey.export({ type: 'spki', format: 'pem' }));
  const withClocks = (name: string, clocks: Array<[bigint, number]>) => {
    const dir = join(work, name);
    cpSync(exported, dir, { recursive: true });
    const file = join(dir, 'anchors.json');
    const doc = JSON.parse(readFileSync(file, 'utf8'));
    doc.checkpoints.forEach((c: any, i: number) => {
      const [clock, reset] = clocks[Math.min(i, clocks.length - 1)];
      const attest = fakeQuote(c.note.slice(0, c.note.indexOf('\n\n') + 1), clock + BigInt(i), reset);
      c.quote = { attest: attest.toString('base64'), signature: sign('sha256', attest, ak.privateKey).toString('base64') };
    });
    writeFileSync(file, JSON.stringify(doc));
    return verifyTool(['--key', join(exported, 'public-key.pem'), '--export', dir, '--ak', join(work, 'ak.pem')]);
  };
  t.ok(page.json.checkpoints.length >= 2);
  const forward = withClocks('clock-forward', [[1000n, 1]]);
  t.equal(forward.code, 0, forward.out);
  const back = withClocks('clock-back', [
    [5000n, 1],
    [10n, 1],
  ]);
  t.equal(back.code, 1);
  t.match(back.out, /clock went back without a reset/);
  const reset = withClocks('clock-reset', [
    [5000n, 1],
    [10n, 2],
  ]);
  t.equal(reset.code, 0, `a clock that restarts after a TPM reset is accepted: ${reset.out}`);
  const noQuote = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', exported, '--ak', join(work, 'ak.pem')]);
  t.equal(noQuote.code, 1);
  t.match(noQuote.out, /no TPM quote/);

  // More calls, a newer export: the state moves on; then the earlier export is a rollback.
  let lastLeaf = 0;
  for (let i = 0; i < 3; i++) lastLeaf = Number((await client.models.list().withResponse()).response.headers.get('x-audit-leaf'));
  await checkpointCovering(d, secret, lastLeaf + 1);
  const later = join(work, 'later');
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', later]).code, 0);
  const moved = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', later, '--state', state]);
  t.equal(moved.code, 0, moved.out);
  t.match(moved.out, /extends the checkpoint trusted before/);
  const rollback = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', earlier, '--state', state]);
  t.equal(rollback.code, 1);
  t.match(rollback.out, /rolled back/);

  // The same key signing a different history (a log truncated and regrown): a fork against the trusted state.
  // A call right before shutdown is still covered: the daemon signs one last checkpoint as it stops.
  await client.models.list();
  t.equal(await d.stop(), 0);
  const final = join(work, 'final');
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', final]).code, 0);
  const finalAnchors = JSON.parse(readFileSync(join(final, 'anchors.json'), 'utf8'));
  t.equal(finalAnchors.checkpoints.at(-1).size, finalAnchors.tree_size, 'the shutdown checkpoint covers every entry');
  const forkDir = tempDir(t);
  mkdirSync(forkDir, { recursive: true });
  copyFileSync(join(dataDir, 'audit-signing-key.pem'), join(forkDir, 'audit-signing-key.pem'));
  const forkKey = createKey(forkDir, 'acme');
  const fork = await startDaemon(t, ['--data-dir', forkDir, '--config', fastCheckpoints(forkDir)]);
  let forkLeaf = 0;
  for (let i = 0; i < 30; i++)
    forkLeaf = Number(
      (await fetch(`${fork.baseURL}/models`, { headers: { authorization: `Bearer ${forkKey.secret}` } })).headers.get('x-audit-leaf'),
    );
  await checkpointCovering(fork, forkKey.secret, forkLeaf + 1);
  const forked = join(work, 'forked');
  t.equal(cli(['audit', 'export', '--data-dir', forkDir, '--out', forked]).code, 0);
  const standalone = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', forked]);
  t.equal(standalone.code, 0, 'on its own, the regrown log is well-formed…');
  const forkCheck = verifyTool(['--key', join(exported, 'public-key.pem'), '--export', forked, '--state', state]);
  t.equal(forkCheck.code, 1, '…but it does not extend what was trusted');
  t.match(forkCheck.out, /forked/);
  await fork.stop();

  // A replaced key: checkpoints before and after verify with both keys, not with the new one alone.
  copyFileSync(join(forkDir, 'audit-signing-key.pem'), join(work, 'old-signing-key.pem'));
  rmSync(join(forkDir, 'audit-signing-key.pem'));
  const renewed = await startDaemon(t, ['--data-dir', forkDir, '--config', fastCheckpoints(forkDir)]);
  let renewedLeaf = 0;
  for (let i = 0; i < 3; i++)
    renewedLeaf = Number(
      (await fetch(`${renewed.baseURL}/models`, { headers: { authorization: `Bearer ${forkKey.secret}` } })).headers.get('x-audit-leaf'),
    );
  await checkpointCovering(renewed, forkKey.secret, renewedLeaf + 1);
  const rotated = join(work, 'rotated');
  t.equal(cli(['audit', 'export', '--data-dir', forkDir, '--out', rotated]).code, 0);
  const old = readdirSync(rotated).find((f) => /^public-key-\w+\.pem$/.test(f));
  t.ok(old, 'the export holds the replaced key too');
  const both = verifyTool(['--key', join(rotated, old!), '--key', join(rotated, 'public-key.pem'), '--export', rotated]);
  t.equal(both.code, 0, both.out);
  const newOnly = verifyTool(['--key', join(rotated, 'public-key.pem'), '--export', rotated]);
  t.equal(newOnly.code, 1);
  t.match(newOnly.out, /no signature by a trusted key/);
});

t.test('kill -9 under load: every call that got a response is in the log, and the log verifies', async (t) => {
  const dataDir = tempDir(t);
  const config = fastCheckpoints(dataDir);
  const { secret } = createKey(dataDir, 'acme');
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
  const acknowledged = new Map<number, string>();
  let killed = false;
  const worker = async () => {
    // Bounded: at most 150 calls per worker, and no more once the daemon is gone.
    for (let i = 0; i < 150 && !killed; i++) {
      try {
        const res = await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
        await res.text();
        acknowledged.set(Number(res.headers.get('x-audit-leaf')), res.headers.get('x-request-id')!);
        if (acknowledged.size >= 200 && !killed) {
          killed = true;
          d.proc.kill('SIGKILL');
        }
      } catch {
        return; // the daemon died mid-call: that call got no response
      }
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  await d.exited;
  t.ok(killed, `killed with ${acknowledged.size} calls answered`);

  const again = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
  const highest = Math.max(...acknowledged.keys());
  await checkpointCovering(again, secret, highest + 1);
  const work = tempDir(t);
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', work]).code, 0);
  const r = verifyTool(['--key', join(work, 'public-key.pem'), '--export', work]);
  t.equal(r.code, 0, r.out);
  const entries = readFileSync(join(work, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  const missing = [...acknowledged].filter(([leaf, requestId]) => entries[leaf]?.request_id !== requestId);
  t.same(missing, [], `all ${acknowledged.size} answered calls are in the log under the leaf they were told`);
});
