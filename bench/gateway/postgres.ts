// bench:gateway's cloud-postgres target keeps its shared state in a PostgreSQL 15 of the bench's own
// (test/fixtures/postgres.ts): a cluster in a temporary directory on loopback, with fsync on as a deployment has it,
// stopped and removed when the bench exits. Its processes' CPU time is read from /proc around each window.
import { readdirSync, readFileSync } from 'node:fs';
import { postgresUnavailable, startPostgresCluster, type PostgresCluster } from '../../test/fixtures/postgres.js';

/** Starts the cluster (fsync on); it is stopped (immediately) when this process exits. */
export async function startBenchPostgres(): Promise<PostgresCluster> {
  const unavailable = postgresUnavailable();
  if (unavailable) throw new Error(`the cloud-postgres target needs PostgreSQL 15: ${unavailable}`);
  const cluster = await startPostgresCluster({ fsync: true });
  process.on('exit', () => cluster.closeSync());
  return cluster;
}

/** [utime, stime, cutime, cstime] of a process, in clock ticks; null once it is gone. */
function times(pid: number | string): number[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return [Number(fields[11]), Number(fields[12]), Number(fields[13]), Number(fields[14])];
  } catch {
    return null;
  }
}

/** The parent of a process, or null once it is gone. */
function parentOf(pid: string): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
}

/**
 * The CPU time (user and system, in clock ticks) every process of the server has used so far: the postmaster, each
 * of its children alive now (the backends serving connections, the writers, the checkpointer), and those that have
 * ended, which the postmaster has waited for (its cutime and cstime). It only grows, so two readings bracket a window.
 */
export function postgresCpuTicks(postmaster: number): number {
  const own = times(postmaster);
  if (!own) return NaN;
  let ticks = own[0] + own[1] + own[2] + own[3];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || parentOf(entry) !== postmaster) continue;
    const child = times(entry);
    if (child) ticks += child[0] + child[1];
  }
  return ticks;
}
