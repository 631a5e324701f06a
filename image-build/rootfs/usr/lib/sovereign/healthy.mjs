// Boot assessment: this boot is good once the daemon answers HTTPS on the appliance's socket with its own error
// shape (an unauthenticated GET /v1/health gets 401 from the daemon, which proves the whole stack is serving). Until
// then boot-complete.target is not reached and systemd-boot's try counter for this slot is not reset. If the daemon
// does not answer in time and this boot is one systemd-boot is counting, the machine reboots: after the last try,
// systemd-boot falls back to the other slot. Only with --assess (the boot unit's flag) does it ever reboot.
//   node healthy.mjs [--assess] [URL] [SECONDS]
// Exit 0 once the daemon answers, 1 if it did not in time.
import { existsSync } from 'node:fs';
import { request } from 'node:https';
import { execFileSync } from 'node:child_process';

const args = process.argv.slice(2);
const assess = args[0] === '--assess';
if (assess) args.shift();
const url = args[0] ?? 'https://127.0.0.1:443/v1/health';
const seconds = Number(args[1] ?? 600);
// systemd-boot sets this EFI variable only when it booted an entry with a boot counter (test/image-build.test.ts
// points SOVEREIGN_BOOT_COUNTING at a file of its own).
const COUNTING =
  process.env.SOVEREIGN_BOOT_COUNTING ?? '/sys/firmware/efi/efivars/LoaderBootCountPath-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f';

function answer() {
  return new Promise((resolve) => {
    // Loopback, and the certificate may be the self-signed one first boot made: what is checked is who answers.
    const req = request(url, { rejectUnauthorized: false, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve(res.headers['x-request-id'] && /"error"|"status"/.test(body) ? res.statusCode : null));
    });
    req.on('error', () => resolve(null));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

const deadline = Date.now() + seconds * 1000;
for (;;) {
  const status = await answer();
  if (status) {
    console.log(`sovereign answers at ${url} (HTTP ${status}): this boot is good`);
    process.exit(0);
  }
  if (Date.now() > deadline) break;
  await new Promise((r) => setTimeout(r, 2000));
}
console.error(`sovereign did not answer at ${url} within ${seconds} s`);
if (assess && existsSync(COUNTING)) {
  console.error('this slot is on trial (boot counting): rebooting; systemd-boot falls back after the last try');
  execFileSync('systemctl', ['reboot']);
}
process.exit(1);
