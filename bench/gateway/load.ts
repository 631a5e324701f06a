// The two loads bench:gateway puts on each target.
//
// - `paced`: an open-loop load at a fixed rate: request i is due at start + i/rate whatever happened to the ones
//   before it, and its latency runs from when it was due (so a server that stalls is charged for every request
//   that waited behind the stall, as wrk2 does). autocannon's own rate option cannot do this: it lets each
//   connection send its quota for the second as fast as it can at the start of each second, so a "1,000 requests/s"
//   run is a burst of 1,000 followed by silence.
// - `saturate`: autocannon, closed loop (each connection sends its next request as soon as the last answer is in),
//   for the most requests per second a target serves. Latencies are taken from its per-response event in
//   microseconds; its own histogram keeps whole milliseconds.
//
// Every response is checked: status 200 and, for streams, a body ending in `data: [DONE]`.
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
  /** Requests answered with 200 and a complete body, per second of the measured window. */
  rps: number;
  ok: number;
  failed: number;
  /** Requests that could not be sent on time because every connection was busy (paced only). */
  late: number;
  p50: number;
  p99: number;
  max: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summarise(latencies: number[], ok: number, failed: number, late: number, seconds: number): LoadResult {
  const sorted = Float64Array.from(latencies).sort();
  return {
    rps: ok / seconds,
    ok,
    failed,
    late,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1] : NaN,
  };
}

const isComplete = (body: string, stream: boolean) => (stream ? body.endsWith('data: [DONE]\n\n') : body.startsWith('{"id"'));

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
  let ok = 0;
  let failed = 0;
  let late = 0;
  let inFlight = 0;
  let settled = 0;
  const headers = { ...target.headers, 'content-type': 'application/json' };
  // Every connection is opened (and its TLS handshake done) before the measured window, as a client that has been
  // running for a while would have them.
  await Promise.all(
    Array.from({ length: connections }, () =>
      pool.request({ method: 'POST', path: url.pathname, headers, body: target.body }).then((res) => res.body.text()),
    ),
  );
  const start = performance.now() + 50;
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
          latencies.push(performance.now() - dueAt);
        } else failed++;
      })
      .catch(() => failed++)
      .finally(() => {
        inFlight--;
        settled++;
      });
  };

  await new Promise<void>((resolve) => {
    let next = 0;
    const tick = () => {
      const now = performance.now();
      while (next < total && due(next) <= now) send(next++);
      if (next < total) {
        // Wake shortly before the next one is due; setTimeout's 1 ms granularity is finer than the spacing at the
        // rates measured (0.5 ms at 2,000/s sends two per wake-up).
        setTimeout(tick, Math.max(0, due(next) - performance.now() - 0.2));
      } else resolve();
    };
    setTimeout(tick, 50);
  });
  const deadline = Date.now() + 10_000;
  while (settled < total && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  failed += total - settled;
  await pool.destroy();
  return summarise(latencies, ok, failed, late, seconds);
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
