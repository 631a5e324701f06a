// A cloud cluster as an operator runs it, all on loopback: PostgreSQL (the shared state), Redis (the shared limits),
// three replicas and HAProxy in front. Clients load the cluster through the load balancer, and one replica is killed
// with SIGKILL in the middle of it. The clients see only retries (a refused or cut call, tried again), never a wrong
// answer; and once the killed replica is back on its data directory, every call it acknowledged (an answer with its
// X-Audit-Log and X-Audit-Leaf) is in its audit log, with that call's request id.
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { writeReplicaConfig } from './helpers/cluster.js';
import { cli, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { startHaproxy } from './helpers/haproxy.js';
import { request } from './helpers/http.js';
import { startPostgres } from './helpers/postgres.js';
import { selfSignedCert } from './helpers/tls.js';

/** Clients loading the cluster at once, and how long (bounded in time and in calls). */
const CLIENTS = 8;
const LOAD_MS = 4_000;
const MAX_CALLS = 20_000;
const KILL_AFTER_MS = 1_200;

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

const dir = tempDir(t);
const tls = selfSignedCert(dir);
const pg = await startPostgres(t, { fsync: true });
const redisPort = await freePort();
const redis: ChildProcess = spawn(
  'redis-server',
  ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
  { stdio: 'ignore' },
);
t.teardown(() => {
  if (redis.exitCode === null) redis.kill('SIGTERM');
});

const names = ['a', 'b', 'c'] as const;
type Name = (typeof names)[number];
const configs = Object.fromEntries(
  names.map((name) => [
    name,
    writeReplicaConfig(
      dir,
      name,
      { tls, postgres: { url: pg.url, passwordFile: pg.passwordFile } },
      {
        limits: { store: 'redis', redis: { url: `redis://127.0.0.1:${redisPort}/0`, keyPrefix: 'crash-test:' } },
      },
    ),
  ]),
) as Record<Name, string>;

// Set up before any test: a failure here is thrown, not asserted (the file's plan would end with it).
const must = <R extends { code: number | null; stderr: string }>(r: R): R => {
  if (r.code !== 0) throw new Error(r.stderr);
  return r;
};
must(cli(['db', 'migrate', '--config', configs.a]));
must(cli(['projects', 'create', 'ministry', '--config', configs.a]));
const made = must(
  cli(['keys', 'create', '--project', 'ministry', '--rpm', '1000000', '--tpm', '100000000', '--config', configs.a, '--json']),
);
const secret = made.json.secret as string;

const replicas = {} as Record<Name, RunningDaemon>;
for (const name of names) replicas[name] = await startDaemon(t, ['--config', configs[name]]);
const lb = await startHaproxy(
  t,
  names.map((name) => ({ host: '127.0.0.1', port: Number(new URL(replicas[name].origin).port), name })),
  { tls: true, healthPath: '/readyz' },
);

const QUERY = { knowledge_base: 'circulars', query: 'ساعات عمل الفروع في رمضان', top_k: 2 };
const upload = await request(`${replicas.a.baseURL}/documents`, {
  method: 'POST',
  headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
  body: JSON.stringify({
    knowledge_base: QUERY.knowledge_base,
    filename: 'hours.md',
    content: 'تعميم: ساعات عمل الفروع في رمضان حتى العاشرة مساءً.',
  }),
  ca: tls.ca,
});
if (upload.status !== 201) throw new Error(upload.text);
const documentId = upload.json.id as string;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  json: any;
}

interface Acknowledged {
  log: string;
  leaf: number;
  requestId: string;
}

t.test('a replica killed under load: clients see only retries, and its log keeps every call it acknowledged', async (t) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });
  t.teardown(() => agent.destroy());
  const call = (path: string, body?: unknown) =>
    new Promise<Answer>((resolve, reject) => {
      const req = http.request(
        `http://127.0.0.1:${lb.port}/v1${path}`,
        {
          method: body ? 'POST' : 'GET',
          agent,
          headers: { authorization: `Bearer ${secret}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            let json: unknown;
            try {
              json = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              json = undefined;
            }
            resolve({ status: res.statusCode ?? 0, headers: res.headers, json });
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body ? JSON.stringify(body) : undefined);
    });

  const acknowledged: Acknowledged[] = [];
  const wrong: string[] = [];
  let answered = 0;
  let retries = 0;
  let calls = 0;
  const started = Date.now();
  const killed = new Promise<void>((resolve) =>
    setTimeout(() => {
      replicas.b.proc.kill('SIGKILL');
      resolve();
    }, KILL_AFTER_MS),
  );
  const client = async (n: number) => {
    while (Date.now() - started < LOAD_MS && calls < MAX_CALLS) {
      calls++;
      const query = (calls + n) % 2 === 0;
      // A client's own retries: at most 20 tries of one call, each after a short pause.
      for (let attempt = 1; ; attempt++) {
        const answer = await (query ? call('/documents/query', QUERY) : call('/models')).catch((err: Error): Answer => ({
          status: 0,
          headers: {},
          json: { error: err.message },
        }));
        if (answer.status !== 200) {
          if (attempt >= 20) {
            wrong.push(`gave up after ${attempt} tries: ${answer.status} ${JSON.stringify(answer.json)}`);
            break;
          }
          retries++;
          await new Promise((resolve) => setTimeout(resolve, 50));
          continue;
        }
        const right = query
          ? answer.json?.object === 'documents.query' && answer.json.citations?.[0]?.document_id === documentId
          : answer.json?.object === 'list' && Array.isArray(answer.json.data);
        if (!right) wrong.push(`${query ? 'query' : 'models'}: ${JSON.stringify(answer.json).slice(0, 300)}`);
        answered++;
        const log = answer.headers['x-audit-log'];
        const leaf = answer.headers['x-audit-leaf'];
        const requestId = answer.headers['x-request-id'];
        if (typeof log === 'string' && typeof leaf === 'string' && typeof requestId === 'string') {
          acknowledged.push({ log, leaf: Number(leaf), requestId });
        } else wrong.push(`an answer without its receipt headers: ${JSON.stringify(answer.headers)}`);
        break;
      }
    }
  };
  await Promise.all([...Array.from({ length: CLIENTS }, (_, n) => client(n)), killed]);
  t.comment(`${answered} calls answered, ${retries} retries, over ${Date.now() - started} ms`);
  t.same(wrong, [], 'no wrong answer, and no call given up');
  t.ok(answered > 100, 'the cluster answered throughout');
  const fromB = acknowledged.filter((a) => a.log === 'sovereign/sa-riyadh-1/b');
  t.ok(fromB.length > 0, `B acknowledged ${fromB.length} calls before it was killed`);
  t.ok(acknowledged.filter((a) => a.log !== 'sovereign/sa-riyadh-1/b').length > 0, 'the others answered, before and after');

  // B comes back on its data directory: every call it acknowledged is in its log, as that call.
  replicas.b = await startDaemon(t, ['--config', configs.b]);
  let missing = 0;
  let mismatched = 0;
  for (const { leaf, requestId } of fromB) {
    const receipt = await request(`${replicas.b.baseURL}/audit/anchors?leaf=${leaf}`, {
      headers: { authorization: `Bearer ${secret}` },
      ca: tls.ca,
    });
    if (receipt.status !== 200) missing++;
    else if (receipt.json.entry?.request_id !== requestId) mismatched++;
  }
  t.equal(missing, 0, `every one of B's ${fromB.length} acknowledged calls has its entry after the restart`);
  t.equal(mismatched, 0, 'each entry is that call');
  const ready = await request(`${replicas.b.origin}/readyz`, { ca: tls.ca });
  t.equal(ready.status, 200, 'B is ready again');
});
