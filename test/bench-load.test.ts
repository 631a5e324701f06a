// bench:gateway's load generator, against small servers in a process of their own on loopback: the fixed-rate load is
// open loop (a stall is charged to every request due while it lasted, from its due time, not only to the few on the
// connections), an answer that is not a complete 200 counts as failed in both loads, a streamed body cut short
// included, and rounds are pooled request by request. What the benchmark's figures and goals rest on.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { paced, pooled, saturate, type LoadResult, type Target } from '../bench/gateway/load.js';

// The server counts the requests it has read (the load's own opening calls included) and answers each by its number:
// `stall` holds its event loop for STALL_MS at one request, `fail` answers some with a 500 and some with an incomplete
// body, `stream-cut` ends some streams before their `data: [DONE]`.
const STALL_MS = 300;
const SERVER = `
const http = require('node:http');
const [mode, stallAt] = process.argv.slice(1);
let n = 0;
const server = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    n++;
    if (mode === 'stall' && n === Number(stallAt)) {
      const until = Date.now() + ${STALL_MS};
      while (Date.now() < until);
    }
    if (mode === 'fail' && n % 4 === 0) {
      res.writeHead(500, { 'content-type': 'application/json' });
      return res.end('{"error":{"message":"no"}}');
    }
    if (mode === 'fail' && n % 5 === 0) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end('{"error":"not a completion"}');
    }
    if (mode === 'stream-cut') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"id":"x","choices":[{"index":0,"delta":{"content":"hi"}}]}\\n\\n');
      return res.end(n % 3 === 0 ? '' : 'data: [DONE]\\n\\n');
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"id":"x","choices":[]}');
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ port: server.address().port }) + '\\n'));
`;

/** Starts the server in `mode`; resolves with its chat completions URL. Stopped when the test `on` ends. */
async function startServer(on: Test, mode: string, stallAt = 0): Promise<string> {
  const child = spawn(process.execPath, ['-e', SERVER, mode, String(stallAt)], { stdio: ['ignore', 'pipe', 'inherit'] });
  on.teardown(() => {
    child.kill('SIGKILL');
  });
  const line = await Promise.race([
    once(createInterface({ input: child.stdout }), 'line').then(([first]) => String(first)),
    once(child, 'exit').then(([code]) => Promise.reject(new Error(`the test server exited (${String(code)})`))),
  ]);
  const { port } = JSON.parse(line) as { port: number };
  return `http://127.0.0.1:${port}/v1/chat/completions`;
}

const target = (url: string, stream = false): Target => ({
  name: 'test',
  url,
  headers: {},
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream }),
});

t.test('a stall is charged to every request due while it lasted, from its due time', async (t) => {
  const rate = 100;
  const connections = 2;
  // Request 50 of the window (after the load's opening call on each connection) stalls the server, half a second in.
  const url = await startServer(t, 'stall', connections + 50);
  const result = await paced(target(url), rate, 2, connections);
  t.equal(result.ok, 200, 'every request answered');
  t.equal(result.failed, 0);
  // About 30 requests fall due in the 300 ms; the one due at the stall's start + k × 10 ms waits about 300 − 10k ms
  // for its answer. Timed from when each was sent on a connection (or in a closed loop), only the two on the
  // connections would be slow.
  const slow = result.latencies.filter((ms) => ms >= 100).length;
  t.ok(slow >= 10, `${slow} requests waited 100 ms or more behind the stall`);
  t.ok(result.max >= STALL_MS - 20, `the slowest waited the stall out (${result.max.toFixed(1)} ms)`);
  t.ok(result.late >= 10, `requests due while both connections were busy are counted as sent late (${result.late})`);
  // The window without its first second: the requests due from 1 s on, the stall (at 0.5 s) not among them.
  t.equal(result.steadyLatencies.length, 100);
});

t.test('a fixed-rate load sends every request and counts an answer that is not a complete 200 as failed', async (t) => {
  const connections = 4;
  const url = await startServer(t, 'fail');
  const result = await paced(target(url), 200, 1, connections);
  // The window's requests are the server's numbers connections + 1 to connections + 200; every 4th is a 500, every
  // other 5th a 200 whose body is not a completion.
  let failing = 0;
  for (let n = connections + 1; n <= connections + 200; n++) if (n % 4 === 0 || n % 5 === 0) failing++;
  t.equal(result.failed, failing, `${failing} failed`);
  t.equal(result.ok, 200 - failing);
  t.equal(result.latencies.length, result.ok, 'only answered requests have a latency');
});

t.test('at saturation, a stream that ends before its data: [DONE] counts as failed', async (t) => {
  const url = await startServer(t, 'stream-cut');
  const result = await saturate(target(url, true), 1, 2);
  const answered = result.ok + result.failed;
  t.ok(answered > 30, `${answered} streams answered in a second`);
  // Every third stream the server sends is cut; the last few in flight when the second ends are not counted.
  t.ok(Math.abs(result.failed - answered / 3) <= 4, `${result.failed} of ${answered} counted as failed`);
  t.equal(result.latencies.length, answered, 'every answer has a latency, its status 200');
});

t.test('rounds are pooled request by request, not by their own percentiles', async (t) => {
  const window = (latencies: number[], seconds: number): LoadResult => {
    const sorted = Float64Array.from(latencies).sort();
    return {
      rps: latencies.length / seconds,
      seconds,
      ok: latencies.length,
      failed: 1,
      late: 2,
      sendDelayP99: seconds,
      sendDelayMax: 10 * seconds,
      p50: NaN,
      p99: NaN,
      max: NaN,
      latencies: sorted,
      steadyLatencies: sorted.subarray(0, 10),
      steadyP99: NaN,
    };
  };
  // 99 quick requests in one round and one slow one in the other: the slowest 1% of the 100 is that one, where the
  // two rounds' own p99s (99 and 500) would average to neither.
  const quick = Array.from({ length: 99 }, (_, i) => i + 1);
  const all = pooled([window(quick, 1), window([500], 2)]);
  t.equal(all.ok, 100);
  t.equal(all.failed, 2);
  t.equal(all.late, 4);
  t.equal(all.seconds, 3);
  t.equal(all.rps, 100 / 3, 'answered requests over the windows’ whole time');
  t.equal(all.p99, 500);
  t.equal(all.p50, 51);
  t.equal(all.max, 500);
  t.equal(all.sendDelayP99, 2, 'the latest sender of the windows');
  t.equal(all.sendDelayMax, 20);
  t.equal(all.steadyLatencies.length, 11);
  t.same([...all.latencies.subarray(0, 3)], [1, 2, 3], 'sorted');
});
