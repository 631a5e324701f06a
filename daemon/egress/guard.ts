// The egress guard of the sealed postures: every way this process opens a connection, sends a datagram, resolves a
// name or starts a program goes through Node's own modules, and each of those entry points is wrapped here so that
// an attempt to reach anything but loopback is refused before a packet is sent, and reported.
//
// Covered: TCP (net.Socket#connect: net, tls, http, https, http2, fetch/undici and WebSocket all end there), UDP
// (dgram send and connect), DNS (dns and dns/promises lookups and every resolver query), and programs started through
// child_process (spawn, exec, execFile, fork, and their sync forms) unless they are on the allowed list. Not covered,
// and only the kernel can stop it (systemd's IPAddressDeny= or PrivateNetwork=, see docs/egress.md): native code that
// opens sockets itself (an addon, a library's own threads), worker threads (each has its own copy of these modules),
// and what an allowed program does.
import { syncBuiltinESMExports } from 'node:module';
import childProcess from 'node:child_process';
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import { basename } from 'node:path';

export type EgressChannel = 'tcp' | 'udp' | 'dns' | 'process';
/** What an attempt tried to reach: an address by its range, a name to resolve, or a program. */
export type DestinationKind = 'public' | 'private' | 'link_local' | 'multicast' | 'unspecified' | 'hostname' | 'program';

export interface RefusedAttempt {
  channel: EgressChannel;
  kind: DestinationKind;
  /** host:port, the name, or the program: for the log (never secret: a destination the process itself chose). */
  destination: string;
}

/** The error a refused attempt fails with (as a socket error, a rejected lookup, or thrown by spawn). */
export class EgressRefusedError extends Error {
  readonly code = 'EGRESS_REFUSED';
  constructor(readonly attempt: RefusedAttempt) {
    super(`egress refused: the sealed posture allows no ${attempt.channel} traffic to ${attempt.destination} (${attempt.kind})`);
  }
}

export interface EgressPolicy {
  /** Addresses besides loopback that count as inside (the appliance's own listen address). */
  insideAddresses: readonly string[];
  /** Whether a program may be started (by its path as given to child_process, and its arguments). */
  programAllowed(file: string, args: readonly string[]): boolean;
  onRefused(attempt: RefusedAttempt): void;
}

// ---------------------------------------------------------------------------------------------------------------
// Destinations

function ipv4Parts(address: string): number[] | null {
  const parts = address.split('.').map(Number);
  return parts.length === 4 && parts.every((p) => Number.isInteger(p) && p >= 0 && p <= 255) ? parts : null;
}

/** The kind of an IP address, or 'loopback' (which is inside). */
export function addressKind(address: string): DestinationKind | 'loopback' {
  let ip = address.toLowerCase();
  if (ip.startsWith('[') && ip.endsWith(']')) ip = ip.slice(1, -1);
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(ip);
  if (mapped) ip = mapped[1]!;
  const v4 = ipv4Parts(ip);
  if (v4) {
    const [a, b] = v4 as [number, number];
    if (a === 127) return 'loopback';
    if (a === 0) return 'unspecified';
    if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127)) return 'private';
    if (a === 169 && b === 254) return 'link_local';
    if (a >= 224) return 'multicast';
    return 'public';
  }
  if (ip === '::1') return 'loopback';
  if (ip === '::') return 'unspecified';
  if (/^fe[89ab]/.test(ip)) return 'link_local';
  if (/^f[cd]/.test(ip)) return 'private';
  if (ip.startsWith('ff')) return 'multicast';
  return 'public';
}

/** Names that resolve to loopback without asking a DNS server (RFC 6761). */
function isLocalName(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

// ---------------------------------------------------------------------------------------------------------------
// The wrapped entry points

/** Installed policies, the newest in force (several daemons may run in one process, as in tests). */
const policies: EgressPolicy[] = [];
let policy: EgressPolicy | null = null;
const originals: Array<() => void> = [];

const lastFunction = (args: unknown[]) => [...args].reverse().find((a) => typeof a === 'function') as ((err: Error) => void) | undefined;

/** Refuses (returns the error) or lets through (null) an attempt to reach `host`. */
function judgeHost(channel: EgressChannel, host: string, port: number | string | undefined): EgressRefusedError | null {
  if (!policy) return null;
  const destination = port === undefined ? host : `${host}:${port}`;
  if (net.isIP(host.replace(/^\[|\]$/g, ''))) {
    const kind = addressKind(host);
    if (kind === 'loopback' || policy.insideAddresses.includes(host)) return null;
    return refuse({ channel, kind, destination });
  }
  if (isLocalName(host)) return null;
  return refuse({ channel, kind: 'hostname', destination });
}

function refuse(attempt: RefusedAttempt): EgressRefusedError {
  policy?.onRefused(attempt);
  return new EgressRefusedError(attempt);
}

function wrap<T extends object, K extends keyof T>(target: T, key: K, make: (original: T[K]) => T[K]): void {
  const original = target[key];
  target[key] = make(original);
  originals.push(() => {
    target[key] = original;
  });
}

type AnyFunction = (...args: unknown[]) => unknown;

/** The host and port a net.Socket#connect call is for; null for a unix socket (local by nature). */
function connectTarget(args: unknown[]): { host: string; port: unknown } | null {
  // net.connect passes its arguments already normalised, as [options, callback].
  let first = Array.isArray(args[0]) ? (args[0] as unknown[])[0] : args[0];
  if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
    first = { port: first, host: typeof args[1] === 'string' ? args[1] : undefined };
  }
  if (typeof first === 'string') return null;
  const options = (first ?? {}) as { path?: unknown; host?: unknown; port?: unknown };
  if (options.path !== undefined && options.path !== null) return null;
  return { host: typeof options.host === 'string' && options.host ? options.host : 'localhost', port: options.port };
}

function guardTcp(): void {
  wrap(
    net.Socket.prototype,
    'connect',
    (original) =>
      function connect(this: net.Socket, ...args: unknown[]) {
        const target = connectTarget(args);
        const refused = target && judgeHost('tcp', target.host, target.port as number);
        if (refused) {
          process.nextTick(() => this.destroy(refused));
          return this;
        }
        return (original as AnyFunction).apply(this, args);
      } as typeof original,
  );
}

function guardUdp(): void {
  wrap(
    dgram.Socket.prototype,
    'send',
    (original) =>
      function send(this: dgram.Socket, ...args: unknown[]) {
        // send(msg[, offset, length], port[, address][, callback]); without a port the socket is connected (and its
        // connect was judged).
        const withOffset = typeof args[1] === 'number' && typeof args[2] === 'number' && typeof args[3] === 'number';
        const port = withOffset ? args[3] : args[1];
        const address = withOffset ? args[4] : args[2];
        if (typeof port === 'number') {
          const refused = judgeHost('udp', typeof address === 'string' ? address : 'localhost', port);
          if (refused) {
            const callback = lastFunction(args);
            process.nextTick(() => (callback ? callback(refused) : this.emit('error', refused)));
            return;
          }
        }
        return (original as AnyFunction).apply(this, args);
      } as typeof original,
  );
  wrap(
    dgram.Socket.prototype,
    'connect',
    (original) =>
      function connect(this: dgram.Socket, ...args: unknown[]) {
        const address = typeof args[1] === 'string' ? args[1] : 'localhost';
        const refused = judgeHost('udp', address, args[0] as number);
        if (refused) {
          // connect's callback is a 'connect' listener: a failure goes to the 'error' event, as Node's own do.
          process.nextTick(() => this.emit('error', refused));
          return;
        }
        return (original as AnyFunction).apply(this, args);
      },
  );
}

const RESOLVER_METHODS = [
  'resolve',
  'resolve4',
  'resolve6',
  'resolveAny',
  'resolveCaa',
  'resolveCname',
  'resolveMx',
  'resolveNaptr',
  'resolveNs',
  'resolvePtr',
  'resolveSoa',
  'resolveSrv',
  'resolveTxt',
  'reverse',
] as const;

function guardDns(): void {
  // Callback form: the error goes to the callback, as a failed lookup's would.
  const callbackStyle = (original: AnyFunction) =>
    function guarded(this: unknown, ...args: unknown[]) {
      const name = String(args[0]);
      const refused = net.isIP(name) ? null : judgeHost('dns', name, undefined);
      if (refused) {
        const callback = lastFunction(args);
        if (!callback) throw refused;
        process.nextTick(() => callback(refused));
        return undefined;
      }
      return original.apply(this, args);
    };
  const promiseStyle = (original: AnyFunction) =>
    function guarded(this: unknown, ...args: unknown[]) {
      const name = String(args[0]);
      const refused = net.isIP(name) ? null : judgeHost('dns', name, undefined);
      return refused ? Promise.reject(refused) : original.apply(this, args);
    };
  const dnsModule = dns as unknown as Record<string, AnyFunction>;
  const promises = dns.promises as unknown as Record<string, AnyFunction>;
  for (const method of ['lookup', 'lookupService', ...RESOLVER_METHODS]) {
    if (typeof dnsModule[method] === 'function') wrap(dnsModule, method, (o) => callbackStyle(o));
    if (typeof promises[method] === 'function') wrap(promises, method, (o) => promiseStyle(o));
  }
  const resolver = dns.Resolver.prototype as unknown as Record<string, AnyFunction>;
  const promiseResolver = dns.promises.Resolver.prototype as unknown as Record<string, AnyFunction>;
  for (const method of RESOLVER_METHODS) {
    if (typeof resolver[method] === 'function') wrap(resolver, method, (o) => callbackStyle(o));
    if (typeof promiseResolver[method] === 'function') wrap(promiseResolver, method, (o) => promiseStyle(o));
  }
}

function judgeProgram(file: unknown, args: unknown): EgressRefusedError | null {
  const list = Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : [];
  if (!policy || typeof file !== 'string' || policy.programAllowed(file, list)) return null;
  return refuse({ channel: 'process', kind: 'program', destination: basename(file) });
}

function guardProcesses(): void {
  // spawn, exec, execFile and fork all create a ChildProcess and call its spawn() with the file to run.
  // (Not in the type definitions, but what every async form calls.)
  const prototype = childProcess.ChildProcess.prototype as unknown as Record<string, AnyFunction>;
  wrap(
    prototype,
    'spawn',
    (original) =>
      function spawn(this: unknown, ...args: unknown[]) {
        const options = args[0] as { file?: unknown; args?: unknown } | undefined;
        const refused = judgeProgram(options?.file, options?.args);
        if (refused) throw refused;
        return original.apply(this, args);
      },
  );
  // The sync forms call the binding directly; exec's runs a shell.
  const sync = childProcess as unknown as Record<string, AnyFunction>;
  wrap(
    sync,
    'spawnSync',
    (original) =>
      function spawnSync(this: unknown, ...args: unknown[]) {
        const refused = judgeProgram(args[0], args[1]);
        if (refused) throw refused;
        return original.apply(this, args);
      },
  );
  wrap(
    sync,
    'execFileSync',
    (original) =>
      function execFileSync(this: unknown, ...args: unknown[]) {
        const refused = judgeProgram(args[0], args[1]);
        if (refused) throw refused;
        return original.apply(this, args);
      },
  );
  wrap(
    sync,
    'execSync',
    (original) =>
      function execSync(this: unknown, ...args: unknown[]) {
        const refused = judgeProgram('/bin/sh', ['-c', args[0]]);
        if (refused) throw refused;
        return original.apply(this, args);
      },
  );
}

/**
 * Puts the guard in place for the whole process with this policy (the newest installed is in force). Returns what
 * takes the policy away again; with the last one gone, the built-ins are restored.
 */
export function installEgressGuard(next: EgressPolicy): () => void {
  if (!policies.length) {
    guardTcp();
    guardUdp();
    guardDns();
    guardProcesses();
    // ESM named imports of these built-ins (import { lookup } from 'node:dns') see the wrapped functions too.
    syncBuiltinESMExports();
  }
  policies.push(next);
  policy = next;
  return () => {
    const at = policies.indexOf(next);
    if (at < 0) return;
    policies.splice(at, 1);
    policy = policies[policies.length - 1] ?? null;
    if (policies.length) return;
    while (originals.length) originals.pop()!();
    syncBuiltinESMExports();
  };
}
