// The operator's console in headless Chromium, as an appliance's owner sees it (appliance posture: sealed, HTTPS, the
// real llama.cpp engine): a fresh box shows the first-run checklist and charts with no data (the egress counter's
// flat line excepted); the late-checkpoint alert appears at the top and clears; a model imported and calls made fill
// the charts and move the checklist; a receipt verified in the Audit page ticks its step; English and Arabic, right
// to left, with Arabic-Indic digits where the browser's locale asks. axe-core checks every screen; screenshots go to
// test-artifacts/screenshots/.
import { X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import type { Page } from 'playwright-core';
import { makeModelFixtures } from './fixtures/models.js';
import { capture, launchBrowser, newPage, verifyReceiptInPage } from './helpers/browser.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { fetchTrusting, selfSignedCert } from './helpers/tls.js';

const PASSWORD = 'a passphrase long enough 42';
const NATIONAL_ID = '1000000008';
const dir = tempDir(t, 'sov-console-browser-');
const tls = selfSignedCert(dir);
// The model files are written apart, as a USB stick would bring them; the box starts with none.
const source = makeModelFixtures(join(dir, 'source'));
const manifest = JSON.parse(readFileSync(source.manifest, 'utf8')) as { models: Array<{ id: string }> };
const manifestFile = join(dir, 'manifest.json');
writeFileSync(manifestFile, JSON.stringify({ ...manifest, models: manifest.models.filter((m) => m.id === 'tiny-chat') }));
const dataDir = join(dir, 'data');
const config = join(dir, 'appliance.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'appliance',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: tls.cert, key: tls.key },
    dataDir,
    manifest: manifestFile,
    modelsDir: join(dir, 'models'),
    // An idle log signs no checkpoint for an hour; one older than 4 s raises the alert.
    audit: { heartbeatMs: 3_600_000 },
    alerts: { checkpointLagSeconds: 4 },
  }),
);
const made = cli(['admin', 'create', '--email', 'owner@bank.example', '--password-stdin', '--config', config], {}, `${PASSWORD}\n`);
if (made.code !== 0) throw new Error(made.stderr);
const daemon = await startDaemon(t, ['--config', config]);
const fetchWithCa = fetchTrusting(t, tls.ca);
const clientFor = (apiKey: string) => new OpenAI({ apiKey, baseURL: daemon.baseURL, maxRetries: 0, fetch: fetchWithCa });
const fingerprint = `SHA256:${new X509Certificate(readFileSync(tls.cert)).fingerprint256.toLowerCase()}`;

const browser = await launchBrowser(t);
const { context, page } = await newPage(browser);
const overview = `${daemon.origin}/dashboard/overview`;

/** Reloads the overview until `ready` holds (the page refreshes itself only every 15 s). */
async function reloadUntil(on: Page, ready: () => Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  for (const until = Date.now() + ms; ;) {
    await on.goto(overview);
    await on.getByTestId('status').waitFor();
    if (await ready()) return;
    if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

const stepDone = (id: string) => page.getByTestId(`check-${id}`).getAttribute('data-done');

let key = '';

t.test('a fresh box: the checklist, charts with no data, the late checkpoint raised and cleared', async (t) => {
  await page.goto(`${daemon.origin}/dashboard/`);
  await page.getByLabel('Email').fill('owner@bank.example');
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  t.equal(new URL(page.url()).pathname, '/dashboard/overview', 'the first screen after sign-in');

  const checklist = page.getByTestId('checklist');
  await checklist.waitFor();
  t.match(await checklist.textContent(), /5 steps left/);
  for (const id of ['audit_key_in_tpm', 'model_verified', 'tls_fingerprint_recorded', 'first_key', 'first_verified_receipt']) {
    t.equal(await stepDone(id), 'false', `${id} is to do on a fresh box`);
  }
  const modelStep = page.getByTestId('check-model_verified');
  t.match(await modelStep.textContent(), /sovereign models import FILE/, 'the step shows its command');
  t.ok(await modelStep.getByRole('link', { name: 'Open the Models page' }).isVisible(), 'and links to its screen');
  t.match(await page.getByTestId('check-audit_key_in_tpm').textContent(), /sovereign audit init-tpm/);
  const tlsStep = page.getByTestId('check-tls_fingerprint_recorded');
  t.match(await tlsStep.textContent(), new RegExp(fingerprint), 'the certificate fingerprint to write down');

  // No calls yet: every chart says so, keeping its axes, but the egress counter's flat line is data.
  for (const chart of ['chart-calls', 'chart-tokens', 'chart-p95', 'chart-queue', 'chart-errors', 'chart-redactions']) {
    await page.getByTestId(`${chart}-empty`).waitFor();
    t.ok(await page.getByTestId(chart).isVisible(), `${chart}: drawn with no data, and says so`);
  }
  t.equal(await page.getByTestId('chart-egress-empty').count(), 0, 'the egress history is a line at zero, not "no data"');
  t.match(await page.getByTestId('egress-counter').textContent(), /refused since the first boot: 0\. Since this boot: 0\./);
  t.match(await page.getByTestId('disk').textContent(), /Holds .+B/);
  await capture(t, page, 'overview-fresh-en');

  await tlsStep.getByRole('button', { name: 'I have recorded it' }).click();
  await page.locator('[data-testid="check-tls_fingerprint_recorded"][data-done="true"]').waitFor();
  t.match(await checklist.textContent(), /4 steps left/);

  // The log idles: its newest checkpoint ages past the limit, and the alert comes to the top.
  await reloadUntil(page, () => page.getByTestId('alert-audit_checkpoint_late').isVisible(), 'the late-checkpoint alert');
  t.match(await page.getByTestId('alert-audit_checkpoint_late').textContent(), /Audit checkpoints are late.*since/);
  t.match(await page.getByTestId('status').textContent(), /degraded/, 'the status says it is not ok');
  t.ok(await page.getByTestId('checkpoint-age').evaluate((el) => el.classList.contains('late')), 'the age is marked late');
  await capture(t, page, 'overview-alert-en');
  await page.getByTestId('lang-switch').click();
  await page.getByTestId('alert-audit_checkpoint_late').getByText('نقاط تحقق التدقيق متأخرة').waitFor();
  await capture(t, page, 'overview-alert-ar');
  await page.getByTestId('lang-switch').click();

  // A call grows the log; its checkpoint follows within a second, and the alert clears.
  key = createKey(dataDir, 'retail', ['--config', config]).secret;
  await clientFor(key).models.list();
  await reloadUntil(page, () => page.getByTestId('alerts-none').isVisible(), 'the alert clearing');
  t.match(await page.getByTestId('status').textContent(), /Status: ok/);
  await page.getByTestId('lang-switch').click();
  await page.getByTestId('checklist').getByText('قائمة التشغيل الأول').waitFor();
  await capture(t, page, 'overview-fresh-ar');
  await page.getByTestId('lang-switch').click();
});

t.test("a fresh box's other screens say what to do next, in both languages", async (t) => {
  cli(['projects', 'create', 'quiet', '--config', config]);
  const open = async (name: string, heading: string) => {
    await page.goto(`${daemon.origin}/dashboard/${name}`);
    await page.getByRole('heading', { name: heading, level: 1 }).waitFor();
  };
  // No chat model yet: the administrator is told the command that brings one.
  await open('chat', 'Chat');
  t.match(await page.getByTestId('no-models').textContent(), /sovereign models import FILE/);
  await capture(t, page, 'chat-no-model-en');
  // Usage: the project with a call has data, the one without says so inside the chart's axes.
  await open('usage', 'Usage');
  await page.getByTestId('usage-chart').waitFor();
  t.equal(await page.getByTestId('usage-chart-empty').count(), 0, 'the call made is charted');
  await page.getByLabel('Project').selectOption({ label: 'quiet' });
  await page.getByTestId('usage-chart-empty').waitFor();
  await capture(t, page, 'usage-empty-en');
  await open('keys', 'Projects and keys');
  await page.getByTestId('project-select').selectOption({ label: 'quiet' });
  await page.getByTestId('no-keys').waitFor();
  await capture(t, page, 'keys-empty-en');
  await page.getByTestId('lang-switch').click();
  await page.getByTestId('no-keys').waitFor();
  await capture(t, page, 'keys-empty-ar');
  await page.getByRole('link', { name: 'الاستخدام' }).click();
  await page.getByTestId('usage-chart').waitFor();
  await page.locator('main select').first().selectOption({ label: 'quiet' });
  await page.getByTestId('usage-chart-empty').waitFor();
  await capture(t, page, 'usage-empty-ar');
  await page.getByRole('link', { name: 'المحادثة' }).click();
  await page.getByTestId('no-models').waitFor();
  await capture(t, page, 'chat-no-model-ar');
  await page.getByTestId('lang-switch').click();
});

t.test('a model imported and calls made: the checklist moves on, the charts fill', async (t) => {
  const imported = cli(['models', 'import', join(source.modelsDir, 'tiny-chat.gguf'), '--config', config]);
  t.equal(imported.code, 0, imported.stderr);
  const client = clientFor(key);
  for (let until = Date.now() + 60_000; ;) {
    const health = (await client.get('/health')) as { models: Array<{ id: string; readiness: string }> };
    if (health.models.some((m) => m.id === 'tiny-chat' && m.readiness === 'ready')) break;
    if (Date.now() > until) throw new Error(`tiny-chat not ready: ${JSON.stringify(health)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  for (let i = 0; i < 3; i++) {
    await client.chat.completions.create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: `رقم هويتي ${NATIONAL_ID}` }],
      max_tokens: 3,
    });
  }
  await clientFor('sk-sov-wrong')
    .models.list()
    .catch(() => {});

  await reloadUntil(page, async () => (await stepDone('model_verified')) === 'true', 'the model step');
  t.equal(await stepDone('first_key'), 'true', 'the key made is seen');
  t.match(await page.getByTestId('checklist').textContent(), /2 steps left/);
  const row = page.getByTestId('overview-model-tiny-chat');
  t.match(await row.textContent(), /tiny-chat.*ready/);
  t.notMatch(await row.locator('td').nth(2).textContent(), /^0\//, 'calls per second over the hour');
  t.match(await row.locator('td').nth(5).textContent(), /\d+ ms/, 'a p95 duration');
  for (const chart of ['chart-calls', 'chart-tokens', 'chart-p95', 'chart-errors', 'chart-redactions']) {
    await page.getByTestId(chart).waitFor();
    t.equal(await page.getByTestId(`${chart}-empty`).count(), 0, `${chart}: drawn with data`);
  }
  const redactions = (await page.locator('figure', { has: page.getByTestId('chart-redactions') }).textContent())!;
  t.match(redactions, /National ID/, 'redactions by type');
  t.notMatch(redactions, new RegExp(NATIONAL_ID), 'never the value');
  t.notMatch(await page.content(), new RegExp(NATIONAL_ID), 'nowhere on the page');
  t.match(await page.locator('figure', { has: page.getByTestId('chart-errors') }).textContent(), /invalid_api_key/);
  await page.getByTestId('overview-period').selectOption('168');
  await page.getByTestId('chart-calls').waitFor();
  const labels = await page.getByTestId('chart-calls').locator('text').allTextContents();
  t.ok(new Set(labels).size === labels.length, 'a week: no two axis labels alike');
  await page.getByTestId('overview-period').selectOption('24');
  await capture(t, page, 'overview-en');

  // A receipt verified in the browser is the checklist's last step the daemon cannot see for itself.
  const { response } = await client.models.list().withResponse();
  const requestId = response.headers.get('x-request-id')!;
  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  t.match(await verifyReceiptInPage(page, requestId), /^VERIFIED/);
  await reloadUntil(page, async () => (await stepDone('first_verified_receipt')) === 'true', 'the receipt step');
  t.match(await page.getByTestId('checklist').textContent(), /1 step left/, 'one step, in the singular');
  await capture(t, page, 'checklist-en');
  await page.getByTestId('lang-switch').click();
  await page.getByTestId('checklist').getByText('قائمة التشغيل الأول').waitFor();
  await capture(t, page, 'checklist-ar');
  await page.getByTestId('lang-switch').click();

  await page.getByTestId('lang-switch').click();
  await page.getByRole('heading', { name: 'نظرة عامة', level: 1 }).waitFor();
  t.equal(await page.getAttribute('html', 'dir'), 'rtl');
  t.match(await page.getByTestId('checklist').textContent(), /بقيت خطوة واحدة/, 'the Arabic singular');
  t.equal(await page.getByTestId('chart-calls').getAttribute('dir'), 'ltr', 'time runs left to right in Arabic too');
  await capture(t, page, 'overview-ar');
  await page.getByTestId('lang-switch').click();
});

t.test("Arabic-Indic digits where the browser's locale asks for them", async (t) => {
  const { context: arabic, page: ar } = await newPage(browser, 'ar-SA');
  await arabic.addCookies(await context.cookies());
  await ar.goto(overview);
  await ar.getByRole('heading', { name: 'نظرة عامة', level: 1 }).waitFor();
  const entries = (await ar.locator('.facts li').first().textContent())!;
  t.match(entries, /[٠-٩]/, 'the entry count in Arabic-Indic digits');
  t.notMatch(entries, /[0-9]/, 'and no Latin digit');
  await capture(t, ar, 'overview-ar-SA');
  await arabic.close();
});

t.test('a member sees the status and alerts, not the device’s counters or its checklist', async (t) => {
  const member = cli(['admin', 'create', '--email', 'teller@bank.example', '--password-stdin', '--config', config], {}, `${PASSWORD}\n`);
  t.equal(member.code, 0, member.stderr);
  t.equal(cli(['admin', 'role', '--email', 'teller@bank.example', 'member', '--config', config]).code, 0);
  const { context: other, page: p } = await newPage(browser);
  await p.goto(`${daemon.origin}/dashboard/`);
  await p.getByLabel('Email').fill('teller@bank.example');
  await p.getByLabel('Password').fill(PASSWORD);
  await p.getByRole('button', { name: 'Sign in' }).click();
  await p.getByTestId('status').waitFor();
  t.equal(await p.getByTestId('checklist').count(), 0);
  t.equal(await p.getByTestId('chart-calls').count(), 0);
  await capture(t, p, 'overview-member-en');
  await p.getByTestId('lang-switch').click();
  await p.getByRole('heading', { name: 'نظرة عامة', level: 1 }).waitFor();
  await capture(t, p, 'overview-member-ar');
  await other.close();
});
