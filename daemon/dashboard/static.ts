// The dashboard's front end, built by Vite into dist/dashboard/web when the daemon is built (the appliance never
// builds at boot). Files are read once at start; hashed assets are cached for good, index.html never. Any other
// path under /dashboard/ gets index.html, so the app's own routes survive a reload.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors/index.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.woff': 'font/woff',
  '.mjs': 'text/javascript; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
};

/** Everything the page may load or call comes from the daemon itself. */
export const PAGE_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self'; connect-src 'self'; media-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'permissions-policy': 'camera=(), geolocation=(), microphone=(self)',
};

interface Asset {
  body: Buffer;
  type: string;
  immutable: boolean;
}

function readTree(root: string): Map<string, Asset> {
  const files = new Map<string, Asset>();
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else {
        const rel = relative(root, path).split('\\').join('/');
        files.set(rel, {
          body: readFileSync(path),
          type: TYPES[extname(name)] ?? 'application/octet-stream',
          immutable: rel.startsWith('assets/'),
        });
      }
    }
  };
  walk(root);
  return files;
}

export const WEB_ROOT = join(import.meta.dirname, 'web');

export function registerDashboardPages(app: FastifyInstance, root = WEB_ROOT): void {
  const files = existsSync(join(root, 'index.html')) ? readTree(root) : null;

  app.get('/', async (_request, reply) => reply.redirect('/dashboard/'));
  app.get('/dashboard', async (_request, reply) => reply.redirect('/dashboard/'));
  app.get<{ Params: { '*': string } }>('/dashboard/*', async (request, reply) => {
    if (!files) {
      throw new ApiError('operation_unavailable', 'The dashboard was not built with this daemon. Run `npm run build` and restart.');
    }
    const path = request.params['*'];
    const asset = files.get(path);
    if (!asset && (path.startsWith('assets/') || path.startsWith('api/'))) {
      throw new ApiError('not_found', `No dashboard file '${path}'.`);
    }
    const served = asset ?? files.get('index.html')!;
    reply.headers(PAGE_HEADERS).type(served.type);
    reply.header('cache-control', served.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
    return reply.send(served.body);
  });
}
