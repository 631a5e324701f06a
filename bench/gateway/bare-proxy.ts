// The daemon's own stack with none of its pipeline, for bench:gateway: fastify over HTTPS (the same certificate),
// one undici pool to the echo upstream, the request's JSON parsed and a new body sent, the answer read as the daemon
// reads it (daemon/engines/upstream/response.ts), parsed and reshaped (buffered), or piped through (streamed). No auth, limits, scrubbing or audit. What it costs per call is
// what any pipeline built on this stack starts from, so the distance from it to the daemon is the pipeline's own
// cost. Run as its own process: `node … bare-proxy.ts PORT UPSTREAM_BASE_URL CERT KEY`.
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import { Pool } from 'undici';
import { readJson } from '../../daemon/engines/upstream/body.js';
import { dispatch } from '../../daemon/engines/upstream/response.js';

const [port, upstreamBase, certFile, keyFile] = process.argv.slice(2);
if (!port || !upstreamBase || !certFile || !keyFile) {
  process.stderr.write('usage: bare-proxy.ts PORT UPSTREAM_BASE_URL CERT KEY\n');
  process.exit(2);
}
const upstream = new URL(upstreamBase);
const pool = new Pool(upstream.origin, { connections: 64 });
const path = `${upstream.pathname.replace(/\/+$/, '')}/chat/completions`;

interface ChatBody {
  model: string;
  messages: unknown[];
  max_tokens?: number;
  stream?: boolean;
}

const app = Fastify({ https: { cert: readFileSync(certFile), key: readFileSync(keyFile) }, logger: false });
app.get('/health', async () => 'ok');
app.post('/v1/chat/completions', async (request, reply) => {
  const body = request.body as ChatBody;
  const call = {
    method: 'POST',
    path,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'echo',
      messages: body.messages,
      max_tokens: body.max_tokens,
      ...(body.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    }),
  } as const;
  if (body.stream) return reply.type('text/event-stream').send((await pool.request(call)).body);
  const answer = await readJson<{ choices: unknown; usage: unknown }>(await dispatch(pool, call, undefined), 16 * 1024 * 1024);
  return {
    id: 'chatcmpl-bare',
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    choices: answer.choices,
    usage: answer.usage,
  };
});
await app.listen({ port: Number(port), host: '127.0.0.1' });
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
