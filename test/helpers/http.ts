// Raw HTTP(S) for what the OpenAI SDK hides: exact headers, malformed requests, slow bodies.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: any;
}

export function request(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string | Buffer; ca?: Buffer } = {},
): Promise<RawResponse> {
  const u = new URL(url);
  const lib = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = lib.request(
      u,
      { method: options.method ?? 'GET', headers: options.headers ?? {}, ...(options.ca ? { ca: options.ca } : {}), agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (options.body !== undefined) req.end(options.body);
    else req.end();
  });
}

/** Sends bytes as they are over TCP (for requests no client library would send) and returns the raw reply. */
export function rawExchange(origin: string, bytes: string | Buffer, timeoutMs = 5000): Promise<string> {
  const u = new URL(origin);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(Buffer.concat(chunks).toString('latin1'));
    }, timeoutMs);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    });
    socket.on('error', (err) => {
      clearTimeout(timer);
      if (chunks.length) resolve(Buffer.concat(chunks).toString('latin1'));
      else reject(err);
    });
    socket.write(bytes);
  });
}

export function parseRawHeaders(raw: string): { status: number; headers: Record<string, string>; body: string } {
  const [head = '', body = ''] = raw.split('\r\n\r\n');
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body };
}

export const ID_HEADERS = ['x-region', 'x-request-id', 'x-sovereign'] as const;
