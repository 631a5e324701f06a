// A device without a provisioned signer (audit.signer tpm, and no TPM key to be had): the daemon serves and logs
// every call, and wherever a receipt or a checkpoint is missing it says what is wrong and what to do (run
// `sovereign audit init-tpm`, or set SOVEREIGN_AUDIT_SIGNER=software on a development machine): the ?leaf=N receipt's
// 503, /v1/health's audit.problem, and the dashboard's lookup. Through the real daemon.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';

const PASSWORD = 'a long enough password';
const WHAT_TO_DO = /sovereign audit init-tpm.*SOVEREIGN_AUDIT_SIGNER=software/s;

t.test('without a signer, a receipt, health and the dashboard say the signer is not provisioned and how to fix it', async (t) => {
  const dataDir = tempDir(t);
  const config = join(dataDir, 'config.json');
  writeFileSync(config, JSON.stringify({ posture: 'device', dataDir, modelsDir: join(dataDir, 'no-models') }));
  const { secret } = createKey(dataDir, 'acme');
  cli(['admin', 'create', '--email', 'op@bank.example', '--password-stdin', '--config', config], {}, `${PASSWORD}\n`);
  // A TPM nobody listens for: the signing key cannot be had, as on a machine where init-tpm never ran.
  const d = await startDaemon(t, ['--config', config], {
    SOVEREIGN_AUDIT_SIGNER: 'tpm',
    SOVEREIGN_AUDIT_TCTI: 'swtpm:host=127.0.0.1,port=9',
  });
  const auth = { authorization: `Bearer ${secret}` };

  const call = await fetch(`${d.baseURL}/models`, { headers: auth });
  await call.text();
  const leaf = call.headers.get('x-audit-leaf');
  t.match(leaf, /^\d+$/, 'the call is logged');
  const requestId = call.headers.get('x-request-id')!;

  const receipt = await fetch(`${d.baseURL}/audit/anchors?leaf=${leaf}`, { headers: auth });
  t.equal(receipt.status, 503);
  t.equal(receipt.headers.get('retry-after'), null, 'no Retry-After: retrying cannot help until the operator acts');
  const body = (await receipt.json()) as { error: { code: string; type: string; message: string } };
  t.match(body.error, { code: 'audit_unavailable', type: 'server_error' });
  t.match(body.error.message, /no checkpoint is signed on this device/);
  t.match(body.error.message, WHAT_TO_DO, 'the 503 says how to fix it');
  t.notMatch(body.error.message, /Retry in a few seconds/);

  const health = (await (await fetch(`${d.baseURL}/health`, { headers: auth })).json()) as {
    status: string;
    audit: { problem: string | null; signer: string | null };
  };
  t.equal(health.status, 'degraded');
  t.equal(health.audit.signer, null);
  t.match(health.audit.problem, /audit checkpoints cannot be signed/);
  t.match(health.audit.problem, WHAT_TO_DO, 'health says how to fix it');

  const browser = new DashboardClient(d.origin);
  await browser.open();
  t.equal((await browser.call('POST', '/login', { email: 'op@bank.example', password: PASSWORD })).status, 200);
  const lookup = await browser.call('GET', `/audit/lookup?request_id=${requestId}`);
  t.equal(lookup.status, 503);
  t.match(lookup.json.error.message, WHAT_TO_DO, "the dashboard's lookup says so too");
  const summary = await browser.call('GET', '/audit');
  t.match(summary.json.problem, WHAT_TO_DO, "and the dashboard's audit page");
});
