// An OpenAI-shaped chat server that answers at once, for bench:gateway: the floor every gateway is measured against.
// It echoes the last user message back (so a gateway that scrubs output has real text to scan), buffered or as a
// stream of server-sent events, one event per word group. Run as its own process: `node … echo-upstream.ts PORT`.
import http from 'node:http';

const PIECES = 12;

interface Body {
  model?: string;
  stream?: boolean;
  messages?: Array<{ role?: string; content?: unknown }>;
  stream_options?: { include_usage?: boolean };
}

function lastUserText(body: Body): string {
  const messages = body.messages ?? [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const content = messages[i].content;
    if (messages[i].role === 'user' && typeof content === 'string') return content;
  }
  return '';
}

/** The answer cut into about PIECES parts at spaces, as a model streams words. */
function pieces(text: string): string[] {
  const out: string[] = [];
  const size = Math.max(1, Math.ceil(text.length / PIECES));
  let start = 0;
  while (start < text.length) {
    let end = Math.min(text.length, start + size);
    const space = text.indexOf(' ', end);
    end = space === -1 ? text.length : space + 1;
    out.push(text.slice(start, end));
    start = end;
  }
  return out;
}

let counter = 0;

function answer(body: Body, res: http.ServerResponse): void {
  const content = lastUserText(body);
  const id = `chatcmpl-echo${++counter}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model ?? 'echo';
  const usage = { prompt_tokens: Math.ceil(content.length / 4), completion_tokens: Math.ceil(content.length / 4), total_tokens: 0 };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  if (!body.stream) {
    const json = JSON.stringify({
      id,
      object: 'chat.completion',
      created,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: 'stop' }],
      usage,
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
    res.end(json);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const event = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...extra })}\n\n`;
  res.write(event([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
  for (const piece of pieces(content)) res.write(event([{ index: 0, delta: { content: piece }, logprobs: null, finish_reason: null }]));
  res.write(event([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]));
  if (body.stream_options?.include_usage) res.write(event([], { usage }));
  res.end('data: [DONE]\n\n');
}

export function startEchoUpstream(port: number, host = '127.0.0.1'): Promise<http.Server> {
  const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'echo', object: 'model', created: 0, owned_by: 'bench' }] }));
      return;
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"not found","type":"invalid_request_error","param":null,"code":"not_found"}}');
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Body;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Body;
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"bad JSON","type":"invalid_request_error","param":null,"code":null}}');
        return;
      }
      answer(body, res);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const server = await startEchoUpstream(Number(process.argv[2] ?? 0));
  const address = server.address();
  process.stdout.write(`${JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 })}\n`);
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}
