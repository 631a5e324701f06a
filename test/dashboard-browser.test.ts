// The dashboard and chat app end to end, in headless Chromium against a running daemon (cloud posture, HTTPS, the
// real llama.cpp engine on a tiny generated model): sign up, create a key and use it with the openai client, rotate
// and revoke it from the page and watch the client fail, chat in Arabic with a national ID in the message and see
// it redacted, switch languages (the page turns right to left), and see the frontier banner on a frontier daemon.
// Screenshots of each main screen in both languages go to test-artifacts/screenshots/.
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { convert, speech } from './fixtures/audio.js';
import { makeModelFixtures } from './fixtures/models.js';
import { tinyWhisperEntry, writeTinyWhisperModel } from './fixtures/whisper.js';
import { accessibilityProblems, capture, launchBrowser, newPage, verifyReceiptInPage } from './helpers/browser.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { fetchTrusting, selfSignedCert } from './helpers/tls.js';

const PASSWORD = 'a passphrase long enough 42';
const NATIONAL_ID = '1000000008';

const dir = tempDir(t, 'sov-dashboard-browser-');
const tls = selfSignedCert(dir);
const fixtures = makeModelFixtures(dir);
// Speech to text too, for the chat app's voice input: the tiny generated whisper model, and espeak-ng as the voice.
const whisper = writeTinyWhisperModel(join(fixtures.modelsDir, 'tiny-whisper.bin'));
const manifest = JSON.parse(readFileSync(fixtures.manifest, 'utf8')) as { models: unknown[] };
manifest.models.push(tinyWhisperEntry('tiny-whisper.bin', whisper));
writeFileSync(fixtures.manifest, JSON.stringify(manifest));
const microphone = convert(speech(dir, 'What are the branch opening hours?', 'en'), 'wav', dir);
const dataDir = join(dir, 'cloud-data');
const config = join(dir, 'cloud.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'cloud',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: tls.cert, key: tls.key },
    dataDir,
    manifest: fixtures.manifest,
    modelsDir: fixtures.modelsDir,
  }),
);
const ops = createKey(dataDir, 'ops', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config]);
const fetchWithCa = fetchTrusting(t, tls.ca);
const clientFor = (apiKey: string) => new OpenAI({ apiKey, baseURL: daemon.baseURL, maxRetries: 0, fetch: fetchWithCa });

// The engine loads in the background: wait until the chat model is ready.
for (let until = Date.now() + 60_000; ;) {
  const health = (await clientFor(ops.secret).get('/health')) as { models: Array<{ id: string; readiness: string }> };
  const ready = (id: string) => health.models.some((m) => m.id === id && m.readiness === 'ready');
  if (ready('tiny-chat') && ready('tiny-whisper')) break;
  if (Date.now() > until) throw new Error(`tiny-chat not ready: ${JSON.stringify(health)}`);
  await new Promise((r) => setTimeout(r, 200));
}

const browser = await launchBrowser(t, { microphone });
const { page } = await newPage(browser);
const origin = daemon.origin;
const statusOf = (apiKey: string) =>
  clientFor(apiKey)
    .models.list()
    .then(() => 200)
    .catch((e: { status?: number }) => e.status ?? 0);

t.test('sign up, create a key and use it; rotate and revoke it from the page', async (t) => {
  await page.goto(`${origin}/dashboard/`);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await capture(t, page, 'signin-en');
  await page.getByRole('link', { name: /Create one/ }).click();
  await page.getByLabel('Email').fill('nora@bank.example');
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByLabel('First project name').fill('retail');
  await page.getByRole('button', { name: 'Create account' }).click();
  // Signed in, the overview comes first; the keys are a click away.
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByRole('link', { name: 'Keys' }).click();
  await page.getByRole('heading', { name: 'Projects and keys' }).waitFor();

  t.notMatch(await page.evaluate('document.cookie'), /sov_session/, 'the session cookie is out of the page’s reach');

  await page.getByLabel('Name').fill('mobile app');
  await page.getByRole('button', { name: 'Create key' }).click();
  const dialog = page.getByTestId('secret-dialog');
  await dialog.waitFor();
  const secret = (await page.getByTestId('secret').textContent())!;
  t.match(secret, /^sk-sov-/, 'the secret is shown once');
  await capture(t, page, 'key-secret-en');
  await page.getByRole('button', { name: 'I have stored it' }).click();
  t.notMatch(await page.content(), new RegExp(secret.slice(-24)), 'and is gone from the page once closed');

  const answer = await clientFor(secret).chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'hello' }],
    max_tokens: 4,
  });
  t.equal(answer.object, 'chat.completion', 'the openai client works with the key');

  const row = page.locator('tr', { hasText: 'mobile app' });
  await page.reload();
  await row.waitFor();
  t.notMatch((await row.locator('td').nth(4).textContent()) ?? '', /never/, 'last used is shown');

  await row.getByRole('button', { name: 'Rotate' }).click();
  await page.getByTestId('rotate-dialog').getByRole('button', { name: 'Rotate' }).click();
  await page.getByTestId('secret-dialog').waitFor();
  const rotated = (await page.getByTestId('secret').textContent())!;
  await page.getByRole('button', { name: 'I have stored it' }).click();
  t.not(rotated, secret);
  t.equal(await statusOf(secret), 401, 'the old secret fails after rotation');
  t.equal(await statusOf(rotated), 200, 'the new one works');

  await row.getByRole('button', { name: 'Revoke' }).click();
  const confirm = page.getByTestId('confirm');
  await confirm.getByText(/cannot be undone/).waitFor();
  await confirm.getByRole('button', { name: 'Revoke' }).click();
  await row.getByText('revoked').waitFor();
  t.equal(await statusOf(rotated), 401, 'the client fails once the key is revoked');
  await capture(t, page, 'keys-en');

  // A change the page did not make (no CSRF token) is refused.
  const forged = await page.evaluate(async () => {
    const res = await fetch('/dashboard/api/projects', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"name":"forged"}',
    });
    return { status: res.status, body: (await res.json()) as { error: { code: string } } };
  });
  t.equal(forged.status, 403);
  t.equal(forged.body.error.code, 'csrf_token_invalid');
});

t.test('models and health, then the whole dashboard in Arabic, right to left', async (t) => {
  await page.getByRole('link', { name: 'Models and health' }).click();
  await page.getByTestId('models-table').getByText('tiny-chat').waitFor();
  await page.getByText(/SOFTWARE key/).waitFor();
  t.match(
    await page.getByTestId('queue-tiny-chat').textContent(),
    /^\d+ calls? running, \d+ waiting \(priority \d+, default \d+, flex \d+\)$/,
    "each model's queue, by tier",
  );
  await capture(t, page, 'models-en');

  await page.getByTestId('lang-switch').click();
  t.equal(await page.getAttribute('html', 'dir'), 'rtl');
  t.equal(await page.getAttribute('html', 'lang'), 'ar');
  await page.getByRole('heading', { name: 'النماذج والحالة' }).waitFor();
  await capture(t, page, 'models-ar');
  await page.getByRole('link', { name: 'المفاتيح' }).click();
  await page.getByRole('heading', { name: 'المشاريع والمفاتيح' }).waitFor();
  await capture(t, page, 'keys-ar');
});

t.test('chat in Arabic: the national ID never reaches the model, and the page shows where it was redacted', async (t) => {
  await page.getByRole('link', { name: 'المحادثة' }).click();
  await page.getByTestId('model-select').locator('option', { hasText: 'tiny-chat' }).waitFor({ state: 'attached' });
  const message = `مرحباً، رقم هويتي ${NATIONAL_ID} وأريد معرفة رصيدي`;
  await page.getByLabel('رسالتك').fill(message);
  await page.getByLabel('رسالتك').press('Enter');
  const sentAs = page.getByTestId('sent-as');
  await sentAs.waitFor();
  const shown = (await sentAs.textContent())!;
  t.match(shown, /\[NATIONAL_ID\]/, 'the page shows the placeholder the model received');
  t.notMatch(shown, new RegExp(NATIONAL_ID), 'and not the value');
  t.equal(await sentAs.locator('mark.redacted').count(), 1, 'the redacted value is marked');
  await page.locator('li.assistant .leaf').waitFor({ timeout: 60_000 });
  t.match((await page.locator('li.assistant .leaf').textContent())!, /\d+/, 'the answer names its audit entry');
  t.equal(await page.locator('li.user p[dir="auto"]').first().getAttribute('dir'), 'auto');
  await capture(t, page, 'chat-ar');

  const logs = daemon.logs.join('\n');
  t.notMatch(logs, new RegExp(NATIONAL_ID), 'the ID is not in the daemon’s log');

  await page.getByTestId('lang-switch').click();
  await page.getByRole('heading', { name: 'Chat' }).waitFor();
  await capture(t, page, 'chat-en');

  await page.getByTestId('lang-switch').click();
  await page.getByRole('button', { name: 'تسجيل الخروج' }).click();
  await page.getByRole('heading', { name: 'تسجيل الدخول' }).waitFor();
  await capture(t, page, 'signin-ar');
  await page.getByTestId('lang-switch').click();
});

t.test('the chat app: a document uploaded and asked about, with citations; a question spoken into the microphone', async (t) => {
  await page.getByLabel('Email').fill('nora@bank.example');
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('link', { name: 'Chat' }).click();
  await page.getByTestId('model-select').locator('option', { hasText: 'tiny-chat' }).waitFor({ state: 'attached' });
  await page.getByText('Documents', { exact: true }).click();
  const doc = join(dir, 'branch-hours.md');
  writeFileSync(
    doc,
    `# Branch hours\n\nThe Olaya branch opens at eight and closes at four. Salaries go to SA03 8000 0000 6080 1016 7519.\n`,
  );
  await page.getByLabel('File (txt, md, html, pdf)').setInputFiles(doc);
  await page.getByRole('button', { name: 'Upload' }).click();
  await page
    .getByTestId('uploads')
    .getByText(/branch-hours\.md: \d+ passages? indexed, 1 personal value redacted first/)
    .waitFor();
  t.ok(await page.getByLabel(/Answer from the knowledge base my-documents/).isChecked(), 'questions now go to the knowledge base');
  await page.getByLabel('Your message').fill('When does the Olaya branch open?');
  await page.getByLabel('Your message').press('Enter');
  const citations = page.getByTestId('citations').last();
  await citations.waitFor({ timeout: 60_000 });
  const cited = (await citations.textContent())!;
  t.match(cited, /\[1\] branch-hours\.md/, 'the answer cites the document');
  t.match(cited, /\[IBAN\]/, 'whose stored text holds the placeholder');
  t.notMatch(cited, /6080 1016/, 'and never the IBAN');
  await capture(t, page, 'chat-documents-en');
  await page.getByLabel(/Answer from the knowledge base/).uncheck();

  // Voice: Chromium's fake microphone plays espeak-ng's recording; the page sends it to /v1/audio/transcriptions.
  await page.getByTestId('voice').click();
  await page
    .getByTestId('voice-status')
    .getByText(/Recording/)
    .waitFor();
  await new Promise((r) => setTimeout(r, 1500));
  await page.getByTestId('voice').click();
  await page
    .getByTestId('voice-status')
    .getByText(/Transcribed/)
    .waitFor({ timeout: 60_000 });
  t.notOk(await page.locator('p.error[role="alert"]:not([hidden])').count(), 'no error from the transcription');
});

t.test('usage, and the audit log verified in the browser by an administrator', async (t) => {
  const made = cli(['admin', 'create', '--email', 'auditor@bank.example', '--password-stdin', '--config', config], {}, `${PASSWORD}\n`);
  t.equal(made.code, 0, made.stderr);
  // A call whose receipt the auditor will look up by its request id.
  const { response } = await clientFor(ops.secret).models.list().withResponse();
  const requestId = response.headers.get('x-request-id')!;

  const { context, page: admin } = await newPage(browser);
  await admin.goto(`${origin}/dashboard/`);
  await admin.getByLabel('Email').fill('auditor@bank.example');
  await admin.getByLabel('Password').fill(PASSWORD);
  await admin.getByRole('button', { name: 'Sign in' }).click();
  await admin.getByRole('heading', { name: 'Overview' }).waitFor();

  await admin.getByRole('link', { name: 'Usage' }).click();
  await admin.getByTestId('usage-chart').waitFor();
  await admin.getByTestId('usage-table').getByText('/v1/models').first().waitFor();
  await capture(t, admin, 'usage-en');
  await admin.getByTestId('usage-by').selectOption('route');
  await admin.locator('.legend').getByText('/v1/models').waitFor();
  t.match(
    (await admin.getByTestId('usage-chart').getAttribute('aria-label'))!,
    /^Calls per endpoint over the last 24 hours, .+ – .+: \d+ in all$/,
  );

  await admin.getByRole('link', { name: 'Audit' }).click();
  t.match((await admin.getByTestId('signer').textContent())!, /SOFTWARE key, not the TPM/, 'a software signer is unmistakable');
  await admin.getByRole('button', { name: 'Verify the whole log' }).click();
  const verdict = admin.getByTestId('verify-result');
  await verdict.waitFor({ timeout: 60_000 });
  const text = (await verdict.textContent())!;
  t.match(text, /^VERIFIED/, 'the whole log verifies in the page');
  t.match(text, /consistency proofs ok/);
  t.match(text, /every checkpoint's root recomputed from them/);

  t.match(await verifyReceiptInPage(admin, requestId), /^VERIFIED.*included in checkpoint/);

  // The newest entries, filtered by kind: the boot entry, then the key the CLI created for 'ops' (logged through the
  // outbox, by this unix user).
  const entries = admin.getByTestId('entries');
  await entries.locator('tbody tr').first().waitFor();
  await admin.getByTestId('kind-filter').selectOption('boot');
  await admin.locator('[data-testid="entries"][data-filter="boot"]').waitFor();
  t.equal(await entries.locator('tbody tr:not([data-kind="boot"])').count(), 0, 'only boot entries are listed');
  t.match((await entries.locator('tbody tr').first().textContent())!, /config_sha256/);
  await admin.getByTestId('kind-filter').selectOption('key.created');
  await admin.locator('[data-testid="entries"][data-filter="key.created"]').waitFor();
  await entries.locator(`tbody tr[data-kind="key.created"]:has-text("${ops.id}")`).waitFor();
  t.equal(await entries.locator('tbody tr:not([data-kind="key.created"])').count(), 0, 'only key.created entries are listed');
  t.notMatch((await entries.textContent())!, /sk-sov-/, 'no secret on the page');
  await admin.getByTestId('kind-filter').selectOption('');
  await capture(t, admin, 'audit-en');

  await admin.getByTestId('lang-switch').click();
  await admin.getByRole('heading', { name: 'سجل التدقيق' }).waitFor();
  await capture(t, admin, 'audit-ar');
  await admin.getByRole('link', { name: 'الاستخدام' }).click();
  await admin.getByTestId('usage-chart').waitFor();
  await capture(t, admin, 'usage-ar');
  // A week: the time axis carries dates, and no two of its labels are alike (a 24-hour axis once read 11:00 … 11:00).
  await admin.getByLabel('الفترة').selectOption('168');
  await admin.locator('figcaption').getByText(/168/).waitFor();
  const ticks = await admin.locator('[data-testid="usage-chart"] > text').allTextContents();
  t.equal(new Set(ticks).size, ticks.length, `distinct time labels: ${ticks.join(' | ')}`);
  await capture(t, admin, 'usage-week-ar');
  await context.close();
});

t.test('a frontier daemon shows its banner on every screen, and labels the provider’s models', async (t) => {
  // A stand-in for the frontier provider: it lists one model (the daemon's health check asks it).
  const provider = http.createServer((req, res) => {
    req.resume();
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ object: 'list', data: [{ id: 'gpt-x' }] }));
  });
  await new Promise<void>((resolve) => provider.listen(0, '127.0.0.1', resolve));
  t.teardown(() => provider.close());
  const frontierConfig = join(dir, 'frontier.json');
  writeFileSync(
    frontierConfig,
    JSON.stringify({
      posture: 'frontier',
      region: 'sa-riyadh-1',
      listen: { host: '127.0.0.1', port: 0 },
      tls: { cert: tls.cert, key: tls.key },
      dataDir: join(dir, 'frontier-data'),
      modelsDir: join(dir, 'no-models'),
      upstreams: [
        {
          name: 'openai',
          baseUrl: `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1`,
          frontier: true,
          models: [{ id: 'gpt-frontier', upstreamModel: 'gpt-x', capability: 'chat' }],
        },
      ],
    }),
  );
  const frontier = await startDaemon(t, ['--config', frontierConfig]);
  const { page: p } = await newPage(browser);
  await p.goto(`${frontier.origin}/dashboard/`);
  const banner = p.getByTestId('frontier-banner');
  await banner.waitFor();
  t.match((await banner.textContent())!, /leaves the sovereign boundary/);
  await capture(t, p, 'frontier-en');
  await p.getByTestId('lang-switch').click();
  t.match((await banner.textContent())!, /يغادر النطاق السيادي/);
  await capture(t, p, 'frontier-ar');
  await p.getByTestId('lang-switch').click();

  // Signed up, the Models screen names the provider and says its calls leave the boundary.
  await p.getByRole('link', { name: /Create one/ }).click();
  await p.getByLabel('Email').fill('huda@ministry.example');
  await p.getByLabel('Password').fill(PASSWORD);
  await p.getByLabel('First project name').fill('research');
  await p.getByRole('button', { name: 'Create account' }).click();
  await p.getByRole('heading', { name: 'Overview' }).waitFor();
  await p.getByRole('link', { name: 'Models and health' }).click();
  const where = p.getByTestId('where-gpt-frontier');
  await where.waitFor();
  t.equal(await where.textContent(), 'frontier provider openai: calls leave the sovereign boundary');
  t.ok(await banner.isVisible(), 'the banner stays');
  await capture(t, p, 'frontier-models-en');
  await p.getByTestId('lang-switch').click();
  t.match((await where.textContent())!, /الطلبات تخرج من النطاق السيادي/);
  await capture(t, p, 'frontier-models-ar');
  // The accessibility check does find problems: an input without a label is one.
  await p.evaluate("document.body.append(Object.assign(document.createElement('input'), { type: 'text' }))");
  t.match(await accessibilityProblems(p), [/^label: /], 'an unlabelled field is reported');
  await p.getByTestId('lang-switch').click();
  await p.close();
});
