// The native run finder (native/scrub-scan, built by node-gyp on `npm ci` and `npm run build`): where runs.ts's scan
// would find its runs, in one C pass over the text. It is given this package's character tables, so it knows no list
// of its own. Without the built addon (or with SOVEREIGN_SCRUB_SCANNER=js) the JavaScript scan finds them instead:
// the results are the same, only slower.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface NativeScan {
  /** Where every run that may be an IBAN's check digits begins. */
  starts: Int32Array;
  /** Where every run begins some of whose groups in a row have a value's length (runs.ts's mayBeValue). */
  runs: Int32Array;
}

interface Addon {
  init(unitKinds: Uint8Array, unitValues: Int8Array, mayPrecedeIban: Uint8Array, astralKinds: Uint8Array, astralValues: Int8Array): void;
  scan(text: string): NativeScan;
}

const ADDON = join('native', 'scrub-scan', 'build', 'Release', 'scrub_scan.node');

/** The addon, from the nearest directory above this file that holds it (dist/ and the sources sit at two depths). */
function findAddon(): string | null {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    if (existsSync(join(dir, ADDON))) return join(dir, ADDON);
    if (dirname(dir) === dir) return null;
  }
}

/** The native scanner, initialised with the given tables, or null when it is not built or is turned off. */
export function loadNativeScanner(tables: Parameters<Addon['init']>): ((text: string) => NativeScan) | null {
  if (process.env.SOVEREIGN_SCRUB_SCANNER === 'js') return null;
  const path = findAddon();
  if (!path) return null;
  const addon = createRequire(import.meta.url)(path) as Addon;
  addon.init(...tables);
  return (text) => addon.scan(text);
}
