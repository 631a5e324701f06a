// Health checks of one upstream: its own GET /v1/models, every `intervalMs`, and at once when a call finds it not
// answering. What it lists is what it serves now; the service lists an upstream model by /v1/models only while the
// last check answered and named it. Only changes are logged (down, up again, a model gone or back), not every check.
import type { FastifyBaseLogger } from 'fastify';
import type { UpstreamClient } from './client.js';
import { readJson } from './body.js';

export interface UpstreamStatus {
  /** The last check got a usable model list. */
  answering: boolean;
  /** Model names the upstream listed (its own names). */
  served: ReadonlySet<string>;
  /** Why it is not answering, for health and the log; never the upstream's body or address. */
  problem: string | null;
  /** When the last check ended (ms since the epoch). */
  checkedAt: number;
}

const CHECK_TIMEOUT_MS = 5000;
/** A call that found the upstream down asks for a check; more than one a second would only repeat it. */
const SOONEST_RECHECK_MS = 1000;

export class UpstreamMonitor {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;
  private lastCheckStarted = 0;
  private readonly abort = new AbortController();
  status: UpstreamStatus = { answering: false, served: new Set(), problem: 'not checked yet', checkedAt: 0 };

  constructor(
    private readonly client: UpstreamClient,
    private readonly intervalMs: number,
    private readonly timeoutMs: number,
    private readonly onStatus: (status: UpstreamStatus) => void,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Checks now, then every interval. Resolves after the first check. */
  start(): Promise<void> {
    return this.check();
  }

  /** A call found the upstream not answering: check again now rather than at the next interval. */
  checkSoon(): void {
    if (Date.now() - this.lastCheckStarted >= SOONEST_RECHECK_MS) void this.check();
  }

  private check(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    this.running ??= this.probe().finally(() => {
      this.running = null;
      if (this.stopped) return;
      if (this.timer) clearTimeout(this.timer);
      this.timer = setTimeout(() => void this.check(), this.intervalMs);
      this.timer.unref();
    });
    return this.running;
  }

  private async probe(): Promise<void> {
    this.lastCheckStarted = Date.now();
    const signal = AbortSignal.any([this.abort.signal, AbortSignal.timeout(Math.min(this.timeoutMs, CHECK_TIMEOUT_MS))]);
    let next: UpstreamStatus;
    try {
      const response = await this.client.get('/models', signal);
      if (response.statusCode !== 200) {
        await response.dump().catch(() => {});
        const why = response.statusCode === 401 || response.statusCode === 403 ? ' (it refuses our key: check apiKeyFile)' : '';
        next = this.down(`its model list answered status ${response.statusCode}${why}`);
      } else {
        const list = await readJson<{ data?: Array<{ id?: unknown }> }>(response, 4 * 1024 * 1024);
        if (!Array.isArray(list?.data)) next = this.down('its model list is not in OpenAI’s shape');
        else {
          const served = new Set(list.data.map((m) => m?.id).filter((id): id is string => typeof id === 'string'));
          next = { answering: true, served, problem: null, checkedAt: Date.now() };
        }
      }
    } catch (err) {
      if (this.stopped) return;
      const code = (err as { code?: string }).code ?? (err as Error).name;
      if (code === 'TimeoutError' || code === 'AbortError') next = this.down('it did not answer in time');
      else if (err instanceof SyntaxError) next = this.down('its model list is not valid JSON');
      else if ((err as { code?: string }).code) next = this.down(`it is not answering (${code})`);
      else next = this.down((err as Error).message);
    }
    if (this.stopped) return;
    this.report(next);
  }

  private down(problem: string): UpstreamStatus {
    return { answering: false, served: new Set(), problem, checkedAt: Date.now() };
  }

  private report(next: UpstreamStatus): void {
    const before = this.status;
    this.status = next;
    if (before.answering !== next.answering || before.problem !== next.problem) {
      if (next.answering) this.log.info({ upstream: this.client.name, models: next.served.size }, 'the upstream answers its health check');
      else this.log.warn({ upstream: this.client.name, problem: next.problem }, 'the upstream fails its health check');
    }
    this.onStatus(next);
  }

  stop(): void {
    this.stopped = true;
    this.abort.abort();
    if (this.timer) clearTimeout(this.timer);
  }
}
