// A cloud replica's config for the cluster tests (store: postgres): written to `<dir>/<name>.json`, its data directory
// `<dir>/<name>`. Replicas of one test share a host, so each log gets an origin of its own unless `extra.audit` says
// otherwise; `extra` adds or replaces top-level keys (limits, audit).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export function writeReplicaConfig(
  dir: string,
  name: string,
  shared: { tls: { cert: string; key: string }; postgres: { url: string; passwordFile: string; timeoutMs?: number } },
  extra: Record<string, unknown> = {},
): string {
  const file = join(dir, `${name}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      posture: 'cloud',
      region: 'sa-riyadh-1',
      listen: { host: '127.0.0.1', port: 0 },
      tls: { cert: shared.tls.cert, key: shared.tls.key },
      dataDir: join(dir, name),
      store: 'postgres',
      postgres: shared.postgres,
      audit: { origin: `sovereign/sa-riyadh-1/${name}` },
      ...extra,
    }),
  );
  return file;
}
