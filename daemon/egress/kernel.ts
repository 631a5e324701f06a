// What the kernel counted: under systemd with IPAccounting=yes, the service's IP egress bytes and packets (0 is the
// proof that matters: the guard in this process cannot see native code, the kernel sees everything) and how many
// times systemd restarted it. Read with `systemctl show` (over systemd's unix socket), refreshed in the background.
import { readFileSync } from 'node:fs';
import { execa } from 'execa';

export interface KernelAccounting {
  unit: string;
  /** null when accounting is off for the unit (systemd reports no value). */
  ipEgressBytes: number | null;
  ipEgressPackets: number | null;
  /** Restarts systemd made of this unit since it was last started by hand. */
  restarts: number | null;
  readAt: string;
}

/** The systemd unit this process runs in, or null when it is not started by systemd. */
export function systemdUnit(env: NodeJS.ProcessEnv = process.env, cgroupFile = '/proc/self/cgroup'): string | null {
  if (!env.INVOCATION_ID) return null;
  try {
    // cgroup v2: "0::/system.slice/sovereign.service"
    const path =
      readFileSync(cgroupFile, 'utf8')
        .split('\n')
        .find((line) => line.startsWith('0::'))
        ?.slice(3) ?? '';
    const unit = path.split('/').findLast((part) => /\.service$/.test(part));
    return unit ?? null;
  } catch {
    return null;
  }
}

const number = (value: string | undefined) => (value && /^\d+$/.test(value) && value !== '18446744073709551615' ? Number(value) : null);

export async function readKernelAccounting(unit: string): Promise<KernelAccounting> {
  const { stdout } = await execa('systemctl', ['show', unit, '--property=IPEgressBytes,IPEgressPackets,NRestarts'], { timeout: 5000 });
  return parseAccounting(unit, stdout);
}

/**
 * `systemctl show` output ("IPEgressBytes=0" lines) as accounting; systemd prints "[not set]" (or the largest
 * 64-bit number) for a counter that is off, read as null.
 */
export function parseAccounting(unit: string, stdout: string): KernelAccounting {
  const values = new Map(stdout.split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)] as const));
  return {
    unit,
    ipEgressBytes: number(values.get('IPEgressBytes')),
    ipEgressPackets: number(values.get('IPEgressPackets')),
    restarts: number(values.get('NRestarts')),
    readAt: new Date().toISOString(),
  };
}
