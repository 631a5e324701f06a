// Headless Chromium (Debian's package) driven by playwright-core, for end-to-end tests of the dashboard. Chromium's
// own background traffic is switched off, and every request it would make to anything but loopback goes to a
// proxy address on loopback where nothing listens: a test page can reach the daemon under test and nothing else.
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { ROOT } from './daemon.js';

export const CHROMIUM = process.env.SOVEREIGN_CHROMIUM ?? '/usr/bin/chromium';
/** Screenshots of each main screen, kept out of git (.gitignore), for people to look at after a run. */
export const SCREENSHOTS = join(ROOT, 'test-artifacts', 'screenshots');

/**
 * `microphone`: a WAV file Chromium plays as the microphone, with the permission prompt answered yes (Chromium's
 * fake media devices), for the chat app's voice input.
 */
export async function launchBrowser(
  t: { teardown: (fn: () => void | Promise<void>) => void },
  options: { microphone?: string } = {},
): Promise<Browser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-domain-reliability',
      '--disable-sync',
      '--no-pings',
      '--dns-prefetch-disable',
      '--proxy-server=http://127.0.0.1:9',
      ...(options.microphone
        ? [
            '--use-fake-ui-for-media-stream',
            '--use-fake-device-for-media-stream',
            `--use-file-for-fake-audio-capture=${options.microphone}`,
          ]
        : []),
    ],
  });
  t.teardown(() => browser.close());
  return browser;
}

export async function newPage(browser: Browser, locale = 'en-US'): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ ignoreHTTPSErrors: true, locale, viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  return { context, page };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

const AXE = readFileSync(join(ROOT, 'node_modules', 'axe-core', 'axe.min.js'), 'utf8');

/**
 * WCAG 2 A and AA problems axe-core finds on the page as it is now (labels, contrast, roles, language…), one line
 * each: rule, then the elements. axe is evaluated through the debugging protocol, so the page's CSP stays on.
 */
export async function accessibilityProblems(page: Page): Promise<string[]> {
  await page.evaluate(AXE);
  const violations = await page.evaluate<Array<{ id: string; nodes: string[] }>>(
    `axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }).then((r) => r.violations.map((v) => ({ id: v.id, nodes: v.nodes.map((n) => n.target.join(' ')) })))`,
  );
  return violations.map((v) => `${v.id}: ${v.nodes.join(', ')}`);
}

/**
 * A screenshot of a main screen, and its checks: no WCAG 2 A/AA problem axe-core finds (labels, contrast, roles,
 * language…) and no message placeholder left unfilled in the text shown.
 */
export async function capture(
  t: { same: (a: unknown, b: unknown, m: string) => unknown; notMatch: (a: unknown, b: RegExp, m: string) => unknown },
  on: Page,
  name: string,
): Promise<void> {
  await screenshot(on, name);
  t.same(await accessibilityProblems(on), [], `${name}: no accessibility problems axe-core can find`);
  t.notMatch(await on.evaluate('document.body.innerText'), /\{\w+\}/, `${name}: no unfilled placeholder`);
}

/**
 * On the Audit page: finds a call's receipt by its request id (once a checkpoint covers it) and verifies it in the
 * page; resolves with the verdict's text. Each Find is one lookup, and an account has ten a minute: each waits for its
 * answer (the receipt, or the page's error) before another is made.
 */
export async function verifyReceiptInPage(page: Page, requestId: string): Promise<string> {
  const receipt = page.getByTestId('receipt');
  const error = page.locator('p.error[role="alert"]:not([hidden])');
  for (let i = 0; ; i++) {
    await page.getByLabel('Request id (X-Request-Id)').fill(requestId);
    await page.getByRole('button', { name: 'Find' }).click();
    await receipt.or(error).first().waitFor({ timeout: 30_000 });
    if (await receipt.isVisible()) break;
    const said = (await error.textContent()) ?? '';
    if (!/not in a signed checkpoint yet/.test(said) || i >= 8) throw new Error(`no receipt for the call: ${said}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
  await page.getByRole('button', { name: 'Verify this receipt' }).click();
  const verdict = page.getByTestId('receipt-result');
  await verdict.waitFor();
  return (await verdict.textContent()) ?? '';
}
