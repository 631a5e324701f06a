#!/usr/bin/env node
// Builds the native addons in native/ with node-gyp (against the machine's Node headers; nothing is downloaded),
// unless the built addon is newer than its sources. Run by `npm run build` and on `npm ci` (prepare).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const addons = [{ dir: join(root, 'native', 'scrub-scan'), output: join('build', 'Release', 'scrub_scan.node') }];

// npm runs scripts with the path of its own node-gyp in npm_config_node_gyp; outside npm, node-gyp on the PATH.
const nodeGyp = process.env.npm_config_node_gyp;
const command = nodeGyp ? [process.execPath, nodeGyp] : ['node-gyp'];
// The headers of the Node that runs this, where it installed them (Debian's and nodejs.org's builds do, under its
// prefix): used unless npm's config names others, so that no user's build downloads them.
const prefix = join(dirname(process.execPath), '..');
const nodedir = !process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node.h')) ? [`--nodedir=${prefix}`] : [];

for (const { dir, output } of addons) {
  const built = join(dir, output);
  const sources = readdirSync(dir).filter((name) => /\.(c|h|gyp)$/.test(name));
  const newest = Math.max(...sources.map((name) => statSync(join(dir, name)).mtimeMs));
  if (existsSync(built) && statSync(built).mtimeMs >= newest) continue;
  process.stderr.write(`building ${join('native', dir.slice(join(root, 'native').length + 1))} with node-gyp\n`);
  try {
    execFileSync(command[0], [...command.slice(1), 'rebuild', ...nodedir, '--loglevel=warn'], {
      cwd: dir,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  } catch (err) {
    process.stderr.write(
      `could not build ${dir}: ${err.message}\n` +
        'The scrubber needs a C compiler, make and python3 (node-gyp), and Node headers (npm config nodedir, or the headers\n' +
        "installed under Node's prefix, include/node).\n",
    );
    process.exit(1);
  }
}
