// What signs checkpoints: a P-256 key inside the TPM (tpm2-tools through execa, one command at a time), or a
// software key in the data directory when the configuration says so (every checkpoint it signs says so too).
// Both produce DER-encoded ECDSA signatures over SHA-256 of the message.
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign as signWith, type KeyObject } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';

export type SignerKind = 'tpm' | 'software';

export interface Signer {
  readonly kind: SignerKind;
  /** SubjectPublicKeyInfo, PEM. */
  readonly publicKeyPem: string;
  /** First four bytes of SHA-256 of the DER SubjectPublicKeyInfo. */
  readonly keyId: Buffer;
  /** DER-encoded ECDSA P-256 signature over SHA-256(message). */
  sign(message: Buffer): Promise<Buffer>;
  /** The attestation key (PEM) when the signer can also quote, binding a digest to the TPM's own clock. */
  readonly attestationKeyPem?: string;
  /** A TPM2_Quote with `digest` as qualifying data: the TPMS_ATTEST bytes and its DER signature. */
  quote?(digest: Buffer): Promise<Quote>;
}

export interface Quote {
  attest: Buffer;
  signature: Buffer;
}

/** The TPM's clock in a TPMS_ATTEST structure (TPM 2.0 Part 2, 10.12), and the qualifying data it carries. */
export interface AttestClock {
  extraData: Buffer;
  clock: bigint;
  resetCount: number;
  restartCount: number;
  safe: boolean;
}

export function parseAttest(attest: Buffer): AttestClock {
  if (attest.length < 10 || attest.readUInt32BE(0) !== 0xff544347) throw new Error('not a TPM attestation (bad magic)');
  if (attest.readUInt16BE(4) !== 0x8018) throw new Error('not a TPM quote');
  let at = 6;
  at += 2 + attest.readUInt16BE(at); // qualifiedSigner
  const extraSize = attest.readUInt16BE(at);
  const extraData = attest.subarray(at + 2, at + 2 + extraSize);
  at += 2 + extraSize;
  return {
    extraData,
    clock: attest.readBigUInt64BE(at),
    resetCount: attest.readUInt32BE(at + 8),
    restartCount: attest.readUInt32BE(at + 12),
    safe: attest[at + 16] === 1,
  };
}

export function keyIdOf(publicKeyPem: string): Buffer {
  const der = createPublicKey(publicKeyPem).export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(der).digest().subarray(0, 4);
}

/** A P-256 key in a PEM file (PKCS #8), created with mode 0600 on first use. */
export class SoftwareSigner implements Signer {
  readonly kind = 'software';
  readonly publicKeyPem: string;
  readonly keyId: Buffer;
  private readonly key: KeyObject;

  constructor(keyFile: string) {
    if (!existsSync(keyFile)) {
      const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
    }
    this.key = createPrivateKey(readFileSync(keyFile));
    if (this.key.asymmetricKeyType !== 'ec' || this.key.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
      throw new Error(`${keyFile} is not a P-256 private key`);
    }
    this.publicKeyPem = createPublicKey(this.key).export({ type: 'spki', format: 'pem' }).toString();
    this.keyId = keyIdOf(this.publicKeyPem);
  }

  // Signed on the thread pool, never on the event loop that serves the calls.
  sign(message: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      signWith('sha256', message, this.key, (err, signature) => (err ? reject(err) : resolve(signature)));
    });
  }
}

export interface TpmOptions {
  /** TCTI string: device:/dev/tpmrm0 on a device, swtpm:host=127.0.0.1,port=N against swtpm. */
  tcti: string;
  /** Persistent handle of the signing key (owner hierarchy). */
  keyHandle: string;
  /** Persistent handle of the primary key the signing key lives under. */
  primaryHandle: string;
  /** Persistent handle of the attestation key (endorsement hierarchy: its quotes carry the real clock). */
  attestationKeyHandle: string;
  /** Persistent handle of the endorsement-hierarchy primary the attestation key lives under. */
  endorsementPrimaryHandle: string;
}

/** Runs tpm2-tools commands one at a time (the TPM does one thing at a time, and a raw swtpm has no queue). */
class TpmTools {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly tcti: string) {}

  run(tool: string, args: string[]): Promise<string> {
    const next = this.queue.then(async () => {
      const result = await execa(tool, args, {
        env: { TPM2TOOLS_TCTI: this.tcti },
        timeout: 30_000,
        reject: false,
        stripFinalNewline: true,
      });
      if ((result.cause as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
        throw new Error(`${tool} is not installed (install tpm2-tools)`);
      }
      if (result.exitCode !== 0) {
        const detail = (result.stderr || result.stdout || result.shortMessage || String(result.exitCode)).split('\n').slice(-3).join(' ');
        if (/Could not load tcti|Failed to instantiate TCTI/.test(detail)) {
          throw new Error(`cannot reach the TPM through '${this.tcti}' (is the device there, and the TCTI library for it installed?)`);
        }
        throw new Error(`${tool} failed: ${detail}`);
      }
      return result.stdout;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Transient objects and sessions a tool left loaded: without a resource manager they fill the TPM's memory. */
  async flush(): Promise<void> {
    await this.run('tpm2_flushcontext', ['-t']);
    await this.run('tpm2_flushcontext', ['-s']);
  }
}

/**
 * Creates a primary key in `hierarchy` persistent at `primaryHandle`, and under it a key persistent at `handle` (its
 * private part never leaves the TPM); returns the key's public half as PEM.
 */
async function provisionKey(
  tools: TpmTools,
  work: string,
  key: { hierarchy: 'o' | 'e'; primaryHandle: string; algorithm: string; attributes: string; handle: string },
): Promise<string> {
  const [primary, pub, priv, ctx, pem] = ['primary.ctx', 'new.pub', 'new.priv', 'new.ctx', 'new.pem'].map((f) => join(work, f)) as [
    string,
    string,
    string,
    string,
    string,
  ];
  await tools.run('tpm2_createprimary', ['-C', key.hierarchy, '-g', 'sha256', '-G', 'ecc256', '-c', primary]);
  await tools.run('tpm2_evictcontrol', ['-C', 'o', '-c', primary, key.primaryHandle]);
  await tools.flush();
  await tools.run('tpm2_create', ['-C', key.primaryHandle, '-G', key.algorithm, '-a', key.attributes, '-u', pub, '-r', priv]);
  await tools.run('tpm2_load', ['-C', key.primaryHandle, '-u', pub, '-r', priv, '-c', ctx]);
  await tools.run('tpm2_evictcontrol', ['-C', 'o', '-c', ctx, key.handle]);
  await tools.flush();
  await tools.run('tpm2_readpublic', ['-c', key.handle, '-f', 'pem', '-o', pem]);
  const out = readFileSync(pem, 'utf8');
  for (const file of [primary, pub, priv, ctx, pem]) rmSync(file, { force: true });
  return out;
}

export class TpmSigner implements Signer {
  readonly kind = 'tpm';
  private constructor(
    private readonly tools: TpmTools,
    private readonly options: TpmOptions,
    readonly publicKeyPem: string,
    readonly keyId: Buffer,
    readonly attestationKeyPem: string | undefined,
  ) {}

  /** Connects to the key made by `sovereign audit init-tpm`; fails with what to do if it is not there. */
  static async open(options: TpmOptions): Promise<TpmSigner> {
    const tools = new TpmTools(options.tcti);
    const work = mkdtempSync(join(tmpdir(), 'sov-tpm-'));
    try {
      const persistent = await tools.run('tpm2_getcap', ['handles-persistent']);
      if (!persistent.toLowerCase().includes(options.keyHandle.toLowerCase())) {
        throw new Error(`no signing key at ${options.keyHandle} in the TPM (${options.tcti}); run 'sovereign audit init-tpm' first`);
      }
      const pem = join(work, 'key.pem');
      await tools.run('tpm2_readpublic', ['-c', options.keyHandle, '-f', 'pem', '-o', pem]);
      const publicKeyPem = readFileSync(pem, 'utf8');
      // Without the attestation key, checkpoints are signed but not bound to the TPM's clock.
      let attestationKeyPem: string | undefined;
      if (persistent.toLowerCase().includes(options.attestationKeyHandle.toLowerCase())) {
        const ak = join(work, 'ak.pem');
        await tools.run('tpm2_readpublic', ['-c', options.attestationKeyHandle, '-f', 'pem', '-o', ak]);
        attestationKeyPem = readFileSync(ak, 'utf8');
      }
      await tools.flush();
      return new TpmSigner(tools, options, publicKeyPem, keyIdOf(publicKeyPem), attestationKeyPem);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  async sign(message: Buffer): Promise<Buffer> {
    const work = mkdtempSync(join(tmpdir(), 'sov-tpm-'));
    try {
      const input = join(work, 'message');
      const output = join(work, 'signature.der');
      writeFileSync(input, message);
      // -f plain: tpm2-tools 5.x writes the ECDSA signature DER-encoded, as openssl and node:crypto expect.
      await this.tools.run('tpm2_sign', ['-c', this.options.keyHandle, '-g', 'sha256', '-f', 'plain', '-o', output, input]);
      await this.tools.flush();
      return readFileSync(output);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  /** Present only when init-tpm made the attestation key (see `attestationKeyPem`). */
  get quote(): ((digest: Buffer) => Promise<Quote>) | undefined {
    return this.attestationKeyPem ? (digest) => this.quoteNow(digest) : undefined;
  }

  private async quoteNow(digest: Buffer): Promise<Quote> {
    const work = mkdtempSync(join(tmpdir(), 'sov-tpm-'));
    try {
      const attest = join(work, 'attest');
      const signature = join(work, 'signature.der');
      // PCR 0 only because a quote must select something; what matters here is the clock and the qualifying data.
      await this.tools.run('tpm2_quote', [
        '-c',
        this.options.attestationKeyHandle,
        '-l',
        'sha256:0',
        '-q',
        digest.toString('hex'),
        '-m',
        attest,
        '-s',
        signature,
        '-f',
        'plain',
        '-g',
        'sha256',
      ]);
      await this.tools.flush();
      return { attest: readFileSync(attest), signature: readFileSync(signature) };
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  /**
   * Creates the primary key and a non-exportable P-256 signing key (fixedtpm, fixedparent, sensitivedataorigin,
   * sign) and makes both persistent at the configured handles; returns the public key as PEM. With `replace`, keys
   * already at those handles are evicted first; otherwise they are an error.
   */
  static async provision(
    options: TpmOptions,
    replace: boolean,
    progress: (line: string) => void,
  ): Promise<{ publicKeyPem: string; attestationKeyPem: string }> {
    const tools = new TpmTools(options.tcti);
    const work = mkdtempSync(join(tmpdir(), 'sov-tpm-'));
    try {
      const persistent = (await tools.run('tpm2_getcap', ['handles-persistent'])).toLowerCase();
      for (const handle of [options.keyHandle, options.primaryHandle, options.attestationKeyHandle, options.endorsementPrimaryHandle]) {
        if (!persistent.includes(handle.toLowerCase())) continue;
        if (!replace)
          throw new Error(
            `the TPM already has a key at ${handle}; pass --replace to make new keys (old checkpoints stay verifiable with the old public key)`,
          );
        progress(`evicting the key at ${handle}`);
        await tools.run('tpm2_evictcontrol', ['-C', 'o', '-c', handle]);
      }
      progress('creating the signing key (owner hierarchy, P-256, ECDSA-SHA256, never leaves the TPM)');
      const publicKeyPem = await provisionKey(tools, work, {
        hierarchy: 'o',
        primaryHandle: options.primaryHandle,
        algorithm: 'ecc256:ecdsa-sha256',
        attributes: 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign',
        handle: options.keyHandle,
      });
      progress(`signing key persisted at ${options.keyHandle}`);
      // The attestation key lives in the endorsement hierarchy, whose quotes report the TPM's real clock and reset
      // counts (in the owner hierarchy they are obfuscated). Restricted: it signs only what the TPM itself made.
      progress('creating the attestation key (endorsement hierarchy, restricted, P-256)');
      const attestationKeyPem = await provisionKey(tools, work, {
        hierarchy: 'e',
        primaryHandle: options.endorsementPrimaryHandle,
        algorithm: 'ecc256:ecdsa-sha256:null',
        attributes: 'fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign',
        handle: options.attestationKeyHandle,
      });
      progress(`attestation key persisted at ${options.attestationKeyHandle}`);
      return { publicKeyPem, attestationKeyPem };
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
}
