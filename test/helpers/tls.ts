// A self-signed certificate for 127.0.0.1, made with openssl, for the HTTPS postures.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';

export function selfSignedCert(dir: string): { cert: string; key: string; ca: Buffer } {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '2',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { stdio: 'ignore' },
  );
  return { cert, key, ca: readFileSync(cert) };
}

/**
 * A fetch that trusts `ca` (the test's self-signed certificate), for the openai client against an HTTPS posture; its
 * connections close when the test ends.
 */
export function fetchTrusting(t: { teardown: (fn: () => void | Promise<void>) => void }, ca: Buffer): typeof fetch {
  const agent = new Agent({ connect: { ca } });
  t.teardown(() => agent.close());
  return ((url: string, init: RequestInit) => undiciFetch(url, { ...(init as object), dispatcher: agent })) as unknown as typeof fetch;
}
