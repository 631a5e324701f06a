// A full disk (SPEC, Limits: "503 with Retry-After, never a crash and never a silent drop"). The daemon's data
// directory is on a small file system the test makes (test/helpers/small-disk.ts), filled until writes fail. Calls
// through the openai client then get 503 with Retry-After and a message saying the disk is full; health answers
// (200, degraded) and says what failed; the process lives through it all (lmdb's own promises for failed commits,
// the usage counts' flushes). Once space is freed the daemon takes calls again by itself, and after a restart every
// call that was acknowledged with an X-Audit-Leaf is in the log.
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { cli, createKey, ROOT, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { fill, smallDisk, smallDiskUnavailable } from './helpers/small-disk.js';

const unavailable = smallDiskUnavailable();

interface Health {
  status: string;
  audit: { problem: string | null };
  storage: { writable: boolean; problem: string | null };
  service: { previous_stop: string | null };
}

/** One call's outcome: acknowledged (with its leaf and request id) or refused (with what the client was told). */
type Outcome = { leaf: number; requestId: string } | { status: number; code: unknown; message: string; retryAfter: string | null };

t.test(
  'a full data disk: 503s with Retry-After, health says why, no exit; it recovers, and nothing acknowledged is lost',
  {
    skip: unavailable ?? false,
  },
  async (t) => {
    const disk = await smallDisk(t, 24 * 1024 * 1024);
    const dataDir = `${disk.path}/data`;
    const key = createKey(dataDir, 'acme', [], disk.enter);
    const config = `${tempDir(t)}/config.json`;
    // Checkpoints often, so that receipts of the calls are soon there to read.
    writeFileSync(config, JSON.stringify({ audit: { checkpointMs: 200 } }));
    const args = ['--config', config, '--data-dir', dataDir];
    let daemon = await startDaemon(t, args, {}, disk.enter);
    const client = () => new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
    const health = async () => {
      const res = await fetch(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } });
      return { status: res.status, leaf: res.headers.get('x-audit-leaf'), body: (await res.json()) as Health };
    };

    const acknowledged: Array<{ leaf: number; requestId: string }> = [];
    /** A call that reads (models) and one that writes a store (a document), alternately. */
    const call = async (i: number): Promise<Outcome> => {
      const sent =
        i % 2 === 0
          ? client().models.list().withResponse()
          : client()
              .post('/documents', { body: { knowledge_base: 'kb', content: `Document ${i}: ${'words and more words. '.repeat(40)}` } })
              .withResponse();
      try {
        const { response } = await sent;
        const outcome = { leaf: Number(response.headers.get('x-audit-leaf')), requestId: response.headers.get('x-request-id')! };
        acknowledged.push(outcome);
        return outcome;
      } catch (err) {
        if (!(err instanceof OpenAI.APIError)) throw err;
        return { status: err.status ?? 0, code: err.code, message: err.message, retryAfter: err.headers?.get('retry-after') ?? null };
      }
    };
    /** Calls in a bounded loop; every one is acknowledged or refused as a full disk must be. Returns the refused. */
    const load = async (t: Test, calls: number) => {
      const refused: Outcome[] = [];
      for (let i = 0; i < calls; i++) {
        const outcome = await call(i);
        if (!('leaf' in outcome)) refused.push(outcome);
      }
      const wrong = refused.filter(
        (o) =>
          'status' in o &&
          !(
            o.status === 503 &&
            (o.code === 'audit_unavailable' || o.code === 'storage_unavailable') &&
            /^\d+$/.test(o.retryAfter ?? '') &&
            /disk is full|disk full/.test(o.message) &&
            /free space on the data disk/.test(o.message)
          ),
      );
      t.same(wrong, [], `each refused call (${refused.length}) got 503 with Retry-After, a message that the disk is full and what to do`);
      return refused.length;
    };
    const alive = (d: RunningDaemon) => d.proc.exitCode === null && d.proc.signalCode === null;

    t.equal(await load(t, 4), 0, 'with room on the disk, every call is served');

    for (const pass of [1, 2]) {
      await t.test(`pass ${pass}: the disk fills`, async (t) => {
        fill(disk.here);
        t.ok((await load(t, 24)) > 0, 'calls are refused once the disk is full');
        // Past a usage flush (every 5 s) and lmdb's failed commits: health answers throughout, and the process lives.
        let seen: Health | undefined;
        const statuses = new Set<number>();
        for (let i = 0; i < 14; i++) {
          const h = await health();
          statuses.add(h.status);
          if (i === 0) t.equal(h.leaf, null, 'health is unlogged: the log cannot take its entry');
          seen = h.body;
          await new Promise((r) => setTimeout(r, 500));
        }
        t.same([...statuses], [200], 'health answers 200 throughout (7 s)');
        t.ok(alive(daemon), 'the daemon is still running');
        t.equal(seen?.status, 'degraded');
        t.match(seen?.storage, {
          writable: false,
          problem: /data directory cannot be written: (the disk is full|the device reports input)/,
        });
        t.match(seen?.audit.problem, /stopped after a failed write/, 'health says why the log takes no entries');
        const other = await call(0);
        t.match(other, { status: 503, code: 'audit_unavailable' }, 'every other call still gets 503 audit_unavailable');
      });

      rmSync(`${disk.here}/filler`);
      if (pass === 1) {
        await t.test('pass 1: space is freed, and the daemon takes calls again by itself', async (t) => {
          let recovered: Health | undefined;
          for (let i = 0; i < 60 && !recovered; i++) {
            const h = (await health()).body;
            if (h.storage.writable && !h.audit.problem) recovered = h;
            else await new Promise((r) => setTimeout(r, 250));
          }
          t.match(recovered, { status: 'ok', storage: { writable: true, problem: null } }, 'health is ok again');
          t.equal(await load(t, 4), 0, 'every call is served again');
          t.ok(alive(daemon), 'without a restart');
        });
      } else {
        await t.test('pass 2: space is freed and the daemon restarted: every acknowledged call is in the log', async (t) => {
          t.equal(await daemon.stop(), 0, 'the daemon stops cleanly');
          daemon = await startDaemon(t, args, {}, disk.enter);
          const h = await health();
          t.equal(h.body.service.previous_stop, 'clean', 'the next boot counts a clean stop');
          t.equal(await load(t, 2), 0, 'it serves');
          let missing = 0;
          for (const { leaf, requestId } of acknowledged) {
            let receipt: { entry?: { request_id?: string } } | undefined;
            // A receipt waits for a checkpoint that covers it (every 200 ms here).
            for (let i = 0; i < 50 && !receipt?.entry; i++) {
              const res = await fetch(`${daemon.baseURL}/audit/anchors?leaf=${leaf}`, {
                headers: { authorization: `Bearer ${key.secret}` },
              });
              receipt = (await res.json()) as typeof receipt;
              if (res.status === 503) await new Promise((r) => setTimeout(r, 100));
            }
            if (receipt?.entry?.request_id !== requestId) missing++;
          }
          t.ok(acknowledged.length >= 10, `${acknowledged.length} calls acknowledged`);
          t.equal(missing, 0, 'each is in the log, under its leaf');
        });
      }
    }
    t.equal(await daemon.stop(), 0);
    // Every checkpoint signed before, between and after the failures extends the one before it, over every entry.
    const verified = cli(['audit', 'verify', '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' }, undefined, disk.enter);
    t.equal(verified.code, 0, 'the log verifies whole');
    t.match(verified.stdout, /VERIFIED/);
  },
);

t.test("taking in lmdb's failed commits leaves every other unhandled rejection to end the process", async (t) => {
  const store = join(ROOT, 'dist', 'store', 'index.js');
  const script = `const { absorbCommitFailures } = await import(${JSON.stringify(store)});
absorbCommitFailures(() => console.log('absorbed'));
Promise.reject(new Error('a bug elsewhere'));
setTimeout(() => console.log('still running'), 500);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  t.equal(r.status, 1, 'the process ends, as without it');
  t.match(r.stderr, /a bug elsewhere/);
  t.notMatch(r.stdout, /absorbed|still running/);
});
