// The sealed postures' promise, kept and shown: on `device` and `appliance` the guard refuses every outbound attempt
// this process makes (guard.ts), the counter keeps them across boots (counter.ts), and under systemd the kernel's own
// egress accounting is read for health (kernel.ts). On `cloud` and `frontier` none of this runs and health has no
// egress object.
import { basename } from 'node:path';
import { isSealed, type Config } from '../config/index.js';
import { addressKind } from '../net/index.js';
import type { Store } from '../store/index.js';
import { EgressCounter } from './counter.js';
import { installEgressGuard, type RefusedAttempt } from './guard.js';
import { readKernelAccounting, systemdUnit, type KernelAccounting } from './kernel.js';
import type { EgressHealth } from './view.js';

export { EgressRefusedError, type RefusedAttempt } from './guard.js';
export { parseAccounting, systemdUnit } from './kernel.js';
export type { EgressHealth } from './view.js';

interface EgressLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * The internal-network addresses of the configured upstreams: on the sealed postures the guard lets these through
 * (config validation accepts no other address but loopback there).
 */
export function upstreamAddresses(config: Config): string[] {
  const addresses = new Set<string>();
  for (const upstream of config.upstreams) {
    const host = new URL(upstream.baseUrl).hostname.replace(/^\[|\]$/g, '');
    if (addressKind(host) === 'private') addresses.add(host);
  }
  return [...addresses];
}

/** How often the kernel's counters are read again. */
const KERNEL_REFRESH_MS = 15_000;

/** node-llama-cpp checks that a prebuilt binary loads by forking Node to run one of its own files. */
const LLAMA_BINARY_TEST = /[\\/]node_modules[\\/]node-llama-cpp[\\/]dist[\\/]bindings[\\/]utils[\\/]testBindingBinary\.js$/;

/** Node flags that run code other than the script named. */
const CODE_FLAGS = /^(?:-e|--eval|-p|--print|-r|--require|--import|--loader|--experimental-loader|-i|--interactive)(?:=|$)/;

/** argv (argv[0] is Node) runs node-llama-cpp's binary test and nothing else: no flag that brings code of its own. */
function runsOnlyLlamaBinaryTest(argv: readonly string[]): boolean {
  const rest = argv.slice(1);
  const script = rest.findIndex((arg) => !arg.startsWith('-'));
  return script >= 0 && LLAMA_BINARY_TEST.test(rest[script]!) && !rest.slice(0, script).some((arg) => CODE_FLAGS.test(arg));
}

/**
 * Programs the daemon itself starts: tpm2-tools (the audit signer), ffmpeg (speech decoding), nvidia-smi (the
 * hardware probe), systemctl (the kernel's counters), matched by file name; and Node itself only to run
 * node-llama-cpp's binary test.
 */
function programAllowed(config: Config): (file: string, args: readonly string[]) => boolean {
  const names = new Set(['ffmpeg', basename(config.speech.ffmpeg), 'nvidia-smi', 'systemctl']);
  return (file, args) => {
    const name = basename(file);
    if (names.has(name) || /^tpm2_[a-z0-9_]+$/.test(name)) return true;
    return file === process.execPath && runsOnlyLlamaBinaryTest(args);
  };
}

export class EgressService {
  private readonly counter: EgressCounter | null;
  private uninstall: (() => void) | null = null;
  private readonly unit = systemdUnit();
  private kernel: KernelAccounting | null = null;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: Config,
    store: Store,
    private readonly log: EgressLog,
    /** Told of every refusal too (the audit log counts them). */
    private readonly onRefused: (attempt: RefusedAttempt) => void = () => {},
  ) {
    this.counter = isSealed(config.posture) ? new EgressCounter(store) : null;
  }

  /** Puts the guard in place (sealed postures only) and starts reading the kernel's counters under systemd. */
  start(): void {
    if (!this.counter) return;
    const counter = this.counter;
    const inside = this.config.posture === 'appliance' && this.config.listen.host ? [this.config.listen.host] : [];
    const upstreams = upstreamAddresses(this.config);
    inside.push(...upstreams);
    if (upstreams.length) this.log.info({ addresses: upstreams }, 'the egress guard lets through the upstreams on the internal network');
    this.uninstall = installEgressGuard({
      insideAddresses: inside,
      programAllowed: programAllowed(this.config),
      onRefused: (attempt: RefusedAttempt) => {
        counter.record(attempt);
        this.onRefused(attempt);
        this.log.warn({ channel: attempt.channel, kind: attempt.kind, destination: attempt.destination }, 'egress refused');
      },
    });
    if (this.unit) {
      const unit = this.unit;
      const refresh = () =>
        readKernelAccounting(unit).then(
          (read) => (this.kernel = read),
          (err: Error) => this.log.warn({ unit, err: err.message }, 'cannot read the kernel egress accounting'),
        );
      void refresh();
      this.timer = setInterval(() => void refresh(), KERNEL_REFRESH_MS);
      this.timer.unref();
    }
  }

  /** systemd's restart count for this unit, when run by systemd and read. */
  systemdRestarts(): { unit: string; restarts: number | null } | null {
    return this.unit ? { unit: this.unit, restarts: this.kernel?.restarts ?? null } : null;
  }

  /** The health object; null on postures that are not sealed. */
  health(): EgressHealth | null {
    if (!this.counter) return null;
    const counts = this.counter.counts();
    const k = this.kernel;
    return {
      guard: 'on',
      refused_since_first_boot: counts.refusedSinceFirstBoot,
      refused_since_boot: counts.refusedSinceBoot,
      by_channel: counts.byChannel,
      by_destination: counts.byKind,
      last_refused_at: counts.lastRefusedAt,
      kernel: k ? { unit: k.unit, ip_egress_bytes: k.ipEgressBytes, ip_egress_packets: k.ipEgressPackets, read_at: k.readAt } : null,
    };
  }

  close(): void {
    clearInterval(this.timer);
    this.uninstall?.();
    this.uninstall = null;
  }
}
