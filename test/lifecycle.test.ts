// Starting and stopping: the appliance posture's certificate rule, and SIGTERM with calls in flight.
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, openSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { BIN, cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const dataDir = tempDir(t);

t.test('appliance refuses to start without a certificate', async (t) => {
  const r = cli(['serve', '--posture', 'appliance', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir]);
  t.equal(r.code, 1);
  t.match(r.stderr, /appliance posture serves HTTPS only: set 'tls\.cert' and 'tls\.key'/);
  const missing = cli(['serve', '--posture', 'appliance', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir], {
    SOVEREIGN_TLS_CERT: `${dataDir}/absent.pem`,
    SOVEREIGN_TLS_KEY: `${dataDir}/absent.key`,
  });
  t.equal(missing.code, 1);
  t.match(missing.stderr, /cannot read tls\.cert/);
});

t.test('appliance serves HTTPS with the operator certificate', async (t) => {
  const tls = selfSignedCert(dataDir);
  const { secret } = createKey(dataDir);
  const daemon = await startDaemon(t, ['--posture', 'appliance', '--host', '127.0.0.1', '--data-dir', dataDir], {
    SOVEREIGN_TLS_CERT: tls.cert,
    SOVEREIGN_TLS_KEY: tls.key,
  });
  t.match(daemon.baseURL, /^https:\/\/127\.0\.0\.1:\d+\/v1$/);
  const r = await request(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${secret}` }, ca: tls.ca });
  t.equal(r.status, 200);
  t.match(r.json, { posture: 'appliance', sovereign: true });
});

t.test("log.requests: each request's lines name its request id (its logger is made when it first logs)", async (t) => {
  const { secret } = createKey(dataDir, 'logged');
  const config = join(dataDir, 'log-requests.json');
  writeFileSync(config, JSON.stringify({ dataDir, log: { requests: true } }));
  const daemon = await startDaemon(t, ['--config', config]);
  const ok = await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  const missing = await request(`${daemon.origin}/v2/nothing`);
  t.equal(ok.status, 200);
  t.equal(missing.status, 404);
  await new Promise((r) => setTimeout(r, 200));
  const lines = daemon.logs.flatMap((l) => {
    try {
      return [JSON.parse(l) as { msg?: string; reqId?: string; res?: { statusCode?: number } }];
    } catch {
      return [];
    }
  });
  for (const [name, response] of [
    ['the call', ok],
    ['the 404', missing],
  ] as const) {
    const id = response.headers['x-request-id'];
    const own = lines.filter((l) => l.reqId === id);
    t.same(
      own.map((l) => l.msg),
      ['incoming request', 'request completed'],
      `${name}: its two lines carry its X-Request-Id`,
    );
    t.equal(own[1]?.res?.statusCode, response.status, `${name}: and its status`);
  }
});

t.test('SIGTERM lets in-flight calls finish, refuses new ones, then exits 0', async (t) => {
  const { secret } = createKey(dataDir, 'drain');
  // Requests logged, to know when the daemon has read the calls' headers (a loaded machine may take a while).
  const config = join(dataDir, 'drain.json');
  writeFileSync(config, JSON.stringify({ dataDir, log: { requests: true } }));
  const daemon = await startDaemon(t, ['--config', config]);
  const url = new URL(`${daemon.baseURL}/chat/completions`);
  const body = JSON.stringify({ model: 'not-served', messages: [{ role: 'user', content: 'x'.repeat(1000) }] });

  // Three calls whose bodies are only half sent when the signal arrives.
  const inFlight = Array.from({ length: 3 }, () => {
    let req!: http.ClientRequest;
    const done = new Promise<{ status: number; body: string }>((resolve, reject) => {
      req = http.request(
        url,
        {
          method: 'POST',
          agent: false,
          headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
    });
    req.write(body.slice(0, 500));
    return { req, done };
  });
  // In flight: the daemon has their headers (a connection it has not read a request from yet is not in flight).
  const received = () => daemon.logs.filter((l) => l.includes('"incoming request"') && l.includes('/chat/completions')).length;
  for (const until = Date.now() + 10_000; received() < 3 && Date.now() < until;) await new Promise((r) => setTimeout(r, 20));
  t.equal(received(), 3, 'the daemon has the three calls');
  daemon.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 300));

  const refused = await request(`${daemon.origin}/healthz`).then(
    (r) => r.status,
    (err: NodeJS.ErrnoException) => err.code,
  );
  t.equal(refused, 'ECONNREFUSED', 'no new connections once draining');

  for (const { req } of inFlight) req.end(body.slice(500));
  const replies = await Promise.all(inFlight.map((c) => c.done));
  for (const reply of replies) {
    t.equal(reply.status, 404, 'the in-flight call got its full answer');
    t.equal(JSON.parse(reply.body).error.code, 'model_not_found');
  }
  t.equal(await daemon.exited, 0, 'exit code 0');
  t.ok(await daemon.logged('sovereign stopped'), 'the daemon says it stopped');
});

t.test('past limits.maxInFlight a call gets 503 server_overloaded with Retry-After, and capacity comes back', async (t) => {
  const { secret } = createKey(dataDir, 'ceiling');
  const configFile = `${dataDir}/ceiling.json`;
  (await import('node:fs')).writeFileSync(configFile, JSON.stringify({ limits: { maxInFlight: 2 } }));
  const daemon = await startDaemon(t, ['--config', configFile, '--data-dir', dataDir]);
  const url = new URL(`${daemon.baseURL}/chat/completions`);
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] });
  // Two calls held open by half-sent bodies fill the ceiling.
  const held = Array.from({ length: 2 }, () => {
    const req = http.request(url, {
      method: 'POST',
      agent: false,
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    const done = new Promise<number>((resolve, reject) => {
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
    });
    req.write(body.slice(0, 5));
    return { req, done };
  });
  await new Promise((r) => setTimeout(r, 200));
  const refused = await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  t.equal(refused.status, 503);
  t.equal(refused.json.error.code, 'server_overloaded');
  t.match(refused.headers['retry-after'], /^\d+$/);
  t.ok(refused.headers['x-request-id']);
  for (const { req } of held) req.end(body.slice(5));
  t.same(await Promise.all(held.map((h) => h.done)), [404, 404], 'the held calls finish normally');
  const after = await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  t.equal(after.status, 200, 'capacity is released when calls end');
});

t.test('SIGTERM still drains and exits 0 when the log pipe is gone (as after `serve | head`)', async (t) => {
  // A real pipe (a FIFO): Node's own child stdio is a socket pair, which fails differently.
  const fifo = `${dataDir}/log.fifo`;
  execFileSync('mkfifo', [fifo]);
  const readFd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const writeFd = openSync(fifo, 'w');
  const proc = spawn(BIN, ['serve', '--port', '0', '--data-dir', dataDir], { stdio: ['ignore', writeFd, 'ignore'] });
  closeSync(writeFd);
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  t.teardown(() => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
  });
  const reader = new net.Socket({ fd: readFd, readable: true, writable: false });
  await new Promise<void>((resolve) => {
    let seen = '';
    reader.on('data', (d) => {
      seen += d.toString();
      // Close the pipe once boot has logged everything, so the first write that fails is the shutdown's own log
      // line, inside the signal handler (what `sovereign serve | head -3` does).
      if (seen.includes('hardware probed')) resolve();
    });
  });
  reader.destroy();
  await new Promise((r) => setTimeout(r, 200));
  proc.kill('SIGTERM');
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 10_000))]);
  t.equal(code, 0, 'exit code 0 within seconds');
});

t.test('one daemon per data directory: a second refuses to start; a lock left by a killed daemon is taken over', async (t) => {
  const dir = tempDir(t);
  const first = await startDaemon(t, ['--data-dir', dir]);
  const second = cli(['serve', '--port', '0', '--data-dir', dir], { SOVEREIGN_AUDIT_SIGNER: 'software' });
  t.equal(second.code, 1);
  t.match(second.stderr, new RegExp(`another sovereign daemon \\(pid ${first.proc.pid}\\) is serving from`));
  first.proc.kill('SIGKILL');
  await first.exited;
  const third = await startDaemon(t, ['--data-dir', dir]);
  t.match(third.baseURL, /^http:\/\/127\.0\.0\.1:\d+\/v1$/, 'started after the killed one');
  t.equal(await third.stop(), 0);
});
