// The two loads bench:gateway puts on each target.
//
// - `paced`: an open-loop load at a fixed rate: request i is due at start + i/rate whatever happened to the ones
//   before it, and its latency runs from when it was due (so a server that stalls is charged for every request
//   that waited behind the stall, as wrk2 does). autocannon's own rate option cannot do this: it lets each
//   connection send its quota for the second as fast as it can at the start of each second, so a "1,000 requests/s"
//   run is a burst of 1,000 followed by silence. The send times come from a clock thread (see `clock`), not from
//   setTimeout, whose millisecond granularity sent requests up to 1-2 ms late and in pairs.
// - `saturate`: autocannon, closed loop (each connection sends its next request as soon as the last answer is in),
//   for the most requests per second a target serves. Latencies are taken from its per-response event in
//   microseconds; its own histogram keeps whole milliseconds.
//
// Every response is checked: status 200 and, for streams, a body ending in `data: [DONE]`.
import { Worker } from 'node:worker_threads';
import autocannon from 'autocannon';
import { Pool } from 'undici';

export interface Target {
  name: string;
  /** Full URL of the chat completions endpoint. */
  url: string;
  headers: Record<string, string>;
  /** The JSON body of one call (its `stream` flag decides how the answer comes). */
  body: string;
  /** CA certificate (PEM) for an HTTPS target. */
  ca?: string;
}

export interface LoadResult {
  /**
   * Requests answered with 200 and a complete body, per second of `seconds`; for a fixed rate, from the first due time
   * to the last answer, so a target that falls behind shows the rate it served, not the rate it was sent.
   */
  rps: number;
  /** The window's length in seconds (fixed rates: until the last answer). */
  seconds: number;
  ok: number;
  failed: number;
  /** Requests that could not be sent on time because every connection was busy (paced only). */
  late: number;
  /** How long after its due time the slowest 1% of requests were handed to the client, in ms (paced only). */
  sendDelayP99: number;
  /** The longest of those delays, in ms (paced only). */
  sendDelayMax: number;
  p50: number;
  p99: number;
  max: number;
  /** Every answered request's latency in ms, sorted (paced only: windows of several rounds are pooled). */
  latencies: Float64Array;
  /**
   * The latencies of the requests due after the window's first second, sorted (paced only). Every window starts after
   * a pause, and the first second after one is often slower on this machine: without it, what a target does at a
   * steady rate.
   */
  steadyLatencies: Float64Array;
  /** The p99 of `steadyLatencies` (NaN when there are none). */
  steadyP99: number;
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summarise(
  latencies: number[],
  ok: number,
  failed: number,
  late: number,
  seconds: number,
  sendDelays: number[] = [],
  steadyLatencies: number[] = [],
): LoadResult {
  const sorted = Float64Array.from(latencies).sort();
  const steady = Float64Array.from(steadyLatencies).sort();
  return {
    rps: ok / seconds,
    seconds,
    ok,
    failed,
    late,
    sendDelayP99: percentile(Float64Array.from(sendDelays).sort(), 99),
    sendDelayMax: sendDelays.reduce((most, d) => Math.max(most, d), sendDelays.length ? -Infinity : NaN),
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1] : NaN,
    latencies: sorted,
    steadyLatencies: steady,
    steadyP99: percentile(steady, 99),
  };
}

const isComplete = (body: string, stream: boolean) => (stream ? body.endsWith('data: [DONE]\n\n') : body.startsWith('{"id"'));

// The clock thread: it sleeps until the next request is due with Atomics.wait, whose timeout is a futex's (to the
// microsecond, where setTimeout and the event loop count whole milliseconds), then posts how many are due; the
// message wakes the sender's event loop at once. It sleeps rather than spins: a spinning sender would take one of
// the machine's two cores from the target. It says it is ready before it is given the start, so its own start-up
// is not in the window; times are the monotonic clock's (process.hrtime), the same in every thread. Bounded by the
// count it is given.
const CLOCK = `
const { parentPort } = require('node:worker_threads');
const now = () => Number(process.hrtime.bigint()) / 1e6;
const cell = new Int32Array(new SharedArrayBuffer(4));
parentPort.once('message', ({ start, interval, total }) => {
  let next = 0;
  while (next < total) {
    const wait = start + next * interval - now();
    if (wait > 0) Atomics.wait(cell, 0, 0, wait);
    const at = now();
    let due = 0;
    while (next < total && start + next * interval <= at) {
      next++;
      due++;
    }
    if (due) parentPort.postMessage(due);
  }
});
parentPort.postMessage('ready');
`;

/**
 * Starts a clock thread and, once it is ready, calls `onStart` with the first request's due time (50 ms on, as
 * `performance.now()` counts), then `onDue` with the number of requests that have fallen due, one every `interval`
 * ms, `total` in all; resolves once all have.
 */
function clock(interval: number, total: number, onStart: (start: number) => void, onDue: (count: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    if (total === 0) return resolve();
    // No execArgv: the thread needs none of the bench's loaders, and would start slower with them.
    const thread = new Worker(CLOCK, { eval: true, execArgv: [] });
    let given = 0;
    thread.on('message', (message: number | 'ready') => {
      if (message === 'ready') {
        const start = performance.now() + 50;
        onStart(start);
        const monotonic = Number(process.hrtime.bigint()) / 1e6 - performance.now();
        thread.postMessage({ start: start + monotonic, interval, total });
        return;
      }
      given += message;
      onDue(message);
      if (given >= total) resolve();
    });
    thread.on('error', reject);
    thread.on('exit', () =>
      given >= total ? resolve() : reject(new Error(`the load's clock stopped after ${given} of ${total} requests`)),
    );
  });
}

/**
 * Sends `rate` requests per second for `seconds` over at most `connections` keep-alive connections. Bounded: the
 * count is rate × seconds, and requests still unanswered 10 s after the last one was due count as failed.
 */
export async function paced(target: Target, rate: number, seconds: number, connections: number): Promise<LoadResult> {
  const url = new URL(target.url);
  const stream = (JSON.parse(target.body) as { stream?: boolean }).stream === true;
  const pool = new Pool(url.origin, {
    connections,
    pipelining: 1,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
    ...(target.ca ? { connect: { ca: target.ca } } : {}),
  });
  const total = Math.round(rate * seconds);
  const latencies: number[] = [];
  const steadyLatencies: number[] = [];
  let ok = 0;
  let failed = 0;
  let late = 0;
  let inFlight = 0;
  let settled = 0;
  let lastSettled = 0;
  const headers = { ...target.headers, 'content-type': 'application/json' };
  // Every connection is opened (and its TLS handshake done) before the measured window, as a client that has been
  // running for a while would have them.
  await Promise.all(
    Array.from({ length: connections }, () =>
      pool.request({ method: 'POST', path: url.pathname, headers, body: target.body }).then((res) => res.body.text()),
    ),
  );
  // Set by the clock once its thread is ready.
  let start = 0;
  const due = (i: number) => start + (i * 1000) / rate;

  const send = (i: number) => {
    const dueAt = due(i);
    inFlight++;
    if (inFlight > connections) late++;
    pool
      .request({ method: 'POST', path: url.pathname, headers, body: target.body })
      .then(async (res) => {
        const text = await res.body.text();
        if (res.statusCode === 200 && isComplete(text, stream)) {
          ok++;
          const latency = performance.now() - dueAt;
          latencies.push(latency);
          // Request i is due i/rate seconds into the window.
          if (i >= rate) steadyLatencies.push(latency);
        } else failed++;
      })
      .catch(() => failed++)
      .finally(() => {
        inFlight--;
        settled++;
        lastSettled = performance.now();
      });
  };

  const sendDelays: number[] = [];
  let next = 0;
  await clock(
    1000 / rate,
    total,
    (first) => (start = first),
    (count) => {
      for (let k = 0; k < count; k++) {
        sendDelays.push(performance.now() - due(next));
        send(next++);
      }
    },
  );
  const deadline = Date.now() + 10_000;
  while (settled < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  // Taken before the pool is destroyed: destroying it settles the requests still waiting, which are counted here.
  const result = summarise(
    latencies,
    ok,
    failed + (total - settled),
    late,
    Math.max(seconds, (lastSettled - start) / 1000),
    sendDelays,
    steadyLatencies,
  );
  await pool.destroy();
  return result;
}

/** autocannon, closed loop, `connections` at a time, for `seconds`. */
export async function saturate(target: Target, seconds: number, connections: number): Promise<LoadResult> {
  const stream = (JSON.parse(target.body) as { stream?: boolean }).stream === true;
  const latencies: number[] = [];
  let answered = 0;
  let failed = 0;
  const options: autocannon.Options = {
    url: target.url,
    method: 'POST',
    headers: { ...target.headers, 'content-type': 'application/json' },
    body: target.body,
    connections,
    duration: seconds,
    timeout: 30,
    verifyBody: (body) => typeof body === 'string' && isComplete(body, stream),
    ...(target.ca ? { tlsOptions: { ca: target.ca } } : {}),
  };
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(options, (err: Error | null, res: autocannon.Result) => (err ? reject(err) : resolve(res)));
    instance.on('response', (_client, status, _bytes, ms) => {
      if (status === 200) {
        answered++;
        latencies.push(ms);
      } else failed++;
    });
  });
  // A 200 whose body was cut short is counted by autocannon as a mismatch.
  const ok = answered - result.mismatches;
  return summarise(latencies, ok, failed + result.mismatches + result.errors + result.timeouts, 0, result.duration);
}

/** Windows of the same load measured at different times, as one: every request counts. */
export function pooled(windows: LoadResult[]): LoadResult {
  const all = joined(windows.map((w) => w.latencies));
  const steady = joined(windows.map((w) => w.steadyLatencies));
  const sum = (key: 'ok' | 'failed' | 'late') => windows.reduce((n, w) => n + w[key], 0);
  return {
    rps: sum('ok') / windows.reduce((n, w) => n + w.seconds, 0),
    seconds: windows.reduce((n, w) => n + w.seconds, 0),
    ok: sum('ok'),
    failed: sum('failed'),
    late: sum('late'),
    sendDelayP99: Math.max(...windows.map((w) => w.sendDelayP99)),
    sendDelayMax: Math.max(...windows.map((w) => w.sendDelayMax)),
    p50: percentile(all, 50),
    p99: percentile(all, 99),
    max: all.length ? all[all.length - 1] : NaN,
    latencies: all,
    steadyLatencies: steady,
    steadyP99: percentile(steady, 99),
  };
}

/** Sorted arrays as one, sorted. */
function joined(parts: Float64Array[]): Float64Array {
  const all = new Float64Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all.sort();
}
