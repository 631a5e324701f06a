// The egress guard of the sealed postures: every way this process opens a connection, sends a datagram, resolves a
// name or starts a program goes through Node's own modules, and each of those entry points is wrapped here so that
// an attempt to reach anything but loopback is refused before a packet is sent, and reported.
//
// Covered: TCP (net.Socket#connect: net, tls, http, https, http2, fetch/undici and WebSocket all end there), UDP
// (dgram send, connect and multicast joins), DNS (dns and dns/promises lookups and every resolver query), and
// programs started through child_process (spawn, exec, execFile, fork, and their sync forms) unless allowed. Not covered,
// and only the kernel can stop it (systemd's IPAddressDeny= or PrivateNetwork=, see docs/egress.md): native code that
// opens sockets itself (an addon, a library's own threads), worker threads (each has its own copy of these modules),
// and what an allowed program does.
import { syncBuiltinESMExports } from 'node:module';
import childProcess from 'node:child_process';
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import { basename } from 'node:path';
import { addressKind, type AddressKind } from '../net/index.js';

export type EgressChannel = 'tcp' | 'udp' | 'dns' | 'process';
/**
 * What an attempt tried to reach: an address by its range (never loopback: a refused attempt about a loopback address,
 * a DNS query, counts as public), a name to resolve, or a program.
 */
export type DestinationKind = Exclude<AddressKind, 'loopback'> | 'hostname' | 'program';

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
// The wrapped entry points

/** Installed policies (several daemons may run in one process, as in tests): an attempt any of them refuses fails. */
const policies: EgressPolicy[] = [];
const originals: Array<() => void> = [];

const lastFunction = (args: unknown[]) => [...args].reverse().find((a) => typeof a === 'function') as ((err: Error) => void) | undefined;

/** Refuses the attempt for every policy that does not allow it: each counts it; null when all allow it. */
function judge(attempt: RefusedAttempt, allows: (p: EgressPolicy) => boolean): EgressRefusedError | null {
  const refusing = policies.filter((p) => !allows(p));
  if (!refusing.length) return null;
  for (const p of refusing) p.onRefused(attempt);
  return new EgressRefusedError(attempt);
}

/**
 * Refuses (returns the error) or lets through (null) an attempt to reach `host`: an IP address that is loopback or
 * inside, or, where `localName` allows it, exactly "localhost" (resolved by a lookup that is itself judged).
 */
function judgeHost(channel: EgressChannel, host: string, port: unknown, localName = false): EgressRefusedError | null {
  if (!policies.length) return null;
  const destination = typeof port === 'number' || typeof port === 'string' ? `${host}:${port}` : host;
  const bare = host.replace(/^\[|\]$/g, '');
  if (net.isIP(bare)) {
    const kind = addressKind(bare);
    return judge(
      { channel, kind: kind === 'loopback' ? 'public' : kind, destination },
      (p) => kind === 'loopback' || p.insideAddresses.includes(bare),
    );
  }
  if (localName && host.toLowerCase() === 'localhost') return null;
  return judge({ channel, kind: 'hostname', destination }, () => false);
}

type LookupCallback = (err: Error | null, address: string | Array<{ address: string }>, family?: number) => void;
type Lookup = (host: string, options: object, callback: LookupCallback) => void;

/** A lookup (the caller's own, or Node's) whose answers are judged too: "localhost" must come back as loopback. */
function judgedLookup(lookup: Lookup | undefined): Lookup {
  const inner = lookup ?? dnsLookup;
  return (host, options, callback) =>
    inner(host, options, (err, address, family) => {
      if (err) return callback(err, address, family);
      const addresses = Array.isArray(address) ? address.map((a) => a.address) : [address];
      for (const a of addresses) {
        const refused = judgeHost('tcp', a, undefined);
        if (refused) return callback(refused, address, family);
      }
      callback(null, address, family);
    });
}

function wrap<T extends object, K extends keyof T>(target: T, key: K, make: (original: T[K]) => T[K]): void {
  const original = target[key];
  target[key] = make(original);
  originals.push(() => {
    target[key] = original;
  });
}

type AnyFunction = (...args: unknown[]) => unknown;

/** Node's own rule (net.js toNumber): a string that reads as a number of zero or more is a port, else a pipe. */
const isPort = (value: unknown) => typeof value === 'number' || (typeof value === 'string' && Number(value) >= 0);

/** Node's bound dns.lookup, taken before it is wrapped (the judged lookup for "localhost" calls it). */
const dnsLookup = dns.lookup.bind(dns);

function guardTcp(): void {
  wrap(
    net.Socket.prototype,
    'connect',
    (original) =>
      function connect(this: net.Socket, ...args: unknown[]) {
        // net.connect passes its arguments already normalised, as [options, callback]; Socket#connect may also be
        // called as (options[, cb]), (path[, cb]) or (port[, host][, cb]).
        const normalised = Array.isArray(args[0]);
        const first = normalised ? (args[0] as unknown[])[0] : args[0];
        let options: { path?: unknown; host?: unknown; port?: unknown; lookup?: unknown };
        let rest: unknown[];
        if (isPort(first)) {
          options = { port: first, ...(typeof args[1] === 'string' ? { host: args[1] } : {}) };
          rest = args.slice(typeof args[1] === 'string' ? 2 : 1);
        } else if (typeof first === 'string' || (typeof first === 'object' && first !== null && (first as { path?: unknown }).path)) {
          // A unix socket: local by nature.
          return (original as AnyFunction).apply(this, args);
        } else {
          options = { ...(first ?? {}) };
          rest = normalised ? (args[0] as unknown[]).slice(1) : args.slice(1);
        }
        const host = typeof options.host === 'string' && options.host ? options.host : 'localhost';
        const refused = judgeHost('tcp', host, options.port, true);
        if (refused) {
          process.nextTick(() => this.destroy(refused));
          return this;
        }
        // "localhost" is resolved, by the caller's lookup or Node's: what it resolves to is judged as well.
        options.lookup = judgedLookup(options.lookup as Lookup | undefined);
        return (original as AnyFunction).apply(this, [options, ...rest]);
      } as typeof original,
  );
}

function guardUdp(): void {
  // UDP reaches addresses only: a name (even "localhost", which a socket's own lookup could map anywhere) is refused.
  wrap(
    dgram.Socket.prototype,
    'send',
    (original) =>
      function send(this: dgram.Socket, ...args: unknown[]) {
        // Node's own reading (dgram.js): send(msg, offset, length, port, address, cb) when an address or a port is in
        // the long form's places, else send(msg, port, address, cb); no port means the socket is connected (and its
        // connect was judged).
        const long = Boolean(args[4]) || (Boolean(args[3]) && typeof args[3] !== 'function');
        const port = long ? args[3] : args[1];
        const address = long ? args[4] : args[2];
        if (port !== undefined && typeof port !== 'function') {
          const refused = judgeHost('udp', typeof address === 'string' && address ? address : '127.0.0.1', port);
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
        const address = typeof args[1] === 'string' && args[1] ? args[1] : '127.0.0.1';
        const refused = judgeHost('udp', address, args[0]);
        if (refused) {
          // As Node does with a failed connect: to the callback if there is one, else the 'error' event.
          const callback = lastFunction(args);
          process.nextTick(() => (callback ? callback(refused) : this.emit('error', refused)));
          return;
        }
        return (original as AnyFunction).apply(this, args);
      },
  );
  // Joining a multicast group sends a membership report to the network.
  for (const method of ['addMembership', 'addSourceSpecificMembership'] as const) {
    wrap(
      dgram.Socket.prototype,
      method,
      (original) =>
        function join(this: dgram.Socket, ...args: unknown[]) {
          const group = String(method === 'addMembership' ? args[0] : args[1]);
          const refused = judgeHost('udp', group, undefined);
          if (refused) throw refused;
          return (original as AnyFunction).apply(this, args);
        },
    );
  }
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
  // lookup (getaddrinfo) of an address or of exactly "localhost" asks no server; resolver queries (c-ares, which
  // skips /etc/hosts), reverse lookups and lookupService always ask one, so they are refused whatever the name.
  const refusal = (method: string, name: string) =>
    method === 'lookup'
      ? net.isIP(name)
        ? null
        : judgeHost('dns', name, undefined, true)
      : judge({ channel: 'dns', kind: net.isIP(name) ? addressKindForCount(name) : 'hostname', destination: name }, () => false);
  const callbackStyle = (method: string, original: AnyFunction) =>
    function guarded(this: unknown, ...args: unknown[]) {
      const refused = policies.length ? refusal(method, String(args[0])) : null;
      if (refused) {
        const callback = lastFunction(args);
        if (!callback) throw refused;
        process.nextTick(() => callback(refused));
        return undefined;
      }
      return original.apply(this, args);
    };
  const promiseStyle = (method: string, original: AnyFunction) =>
    function guarded(this: unknown, ...args: unknown[]) {
      const refused = policies.length ? refusal(method, String(args[0])) : null;
      return refused ? Promise.reject(refused) : original.apply(this, args);
    };
  const dnsModule = dns as unknown as Record<string, AnyFunction>;
  const promises = dns.promises as unknown as Record<string, AnyFunction>;
  for (const method of ['lookup', 'lookupService', ...RESOLVER_METHODS]) {
    if (typeof dnsModule[method] === 'function') wrap(dnsModule, method, (o) => callbackStyle(method, o));
    if (typeof promises[method] === 'function') wrap(promises, method, (o) => promiseStyle(method, o));
  }
  const resolver = dns.Resolver.prototype as unknown as Record<string, AnyFunction>;
  const promiseResolver = dns.promises.Resolver.prototype as unknown as Record<string, AnyFunction>;
  for (const method of RESOLVER_METHODS) {
    if (typeof resolver[method] === 'function') wrap(resolver, method, (o) => callbackStyle(method, o));
    if (typeof promiseResolver[method] === 'function') wrap(promiseResolver, method, (o) => promiseStyle(method, o));
  }
}

/** An address's kind for the count (a loopback address asked of a DNS server still reaches the server). */
function addressKindForCount(address: string): DestinationKind {
  const kind = addressKind(address);
  return kind === 'loopback' ? 'public' : kind;
}

function judgeProgram(file: unknown, args: unknown, shell = false): EgressRefusedError | null {
  if (!policies.length) return null;
  const list = Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : [];
  // A shell runs whatever its command line says: judged as the shell, which no policy allows.
  const program = shell ? '/bin/sh' : typeof file === 'string' ? file : '';
  return judge({ channel: 'process', kind: 'program', destination: basename(program) }, (p) =>
    shell ? p.programAllowed('/bin/sh', ['-c', ...list]) : p.programAllowed(program, list),
  );
}

/** The options argument of a sync child_process call: after the argument list, or in its place. */
const syncOptions = (args: unknown[]) => (Array.isArray(args[1]) ? args[2] : args[1]) as { shell?: unknown } | undefined;

function guardProcesses(): void {
  // spawn, exec, execFile and fork all create a ChildProcess and call its spawn() with the file to run (for a shell
  // command, the shell) and the whole argument list.
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
  for (const method of ['spawnSync', 'execFileSync'] as const) {
    wrap(
      sync,
      method,
      (original) =>
        function guarded(this: unknown, ...args: unknown[]) {
          const refused = judgeProgram(
            args[0],
            Array.isArray(args[1]) ? [args[0], ...(args[1] as unknown[])] : [args[0]],
            Boolean(syncOptions(args)?.shell),
          );
          if (refused) throw refused;
          return original.apply(this, args);
        },
    );
  }
  wrap(
    sync,
    'execSync',
    (original) =>
      function execSync(this: unknown, ...args: unknown[]) {
        const refused = judgeProgram('/bin/sh', [args[0]], true);
        if (refused) throw refused;
        return original.apply(this, args);
      },
  );
}

/**
 * Puts the guard in place for the whole process with this policy (with several installed, an attempt any of them
 * refuses fails). Returns what takes the policy away again; with the last one gone, the built-ins are restored.
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
  return () => {
    const at = policies.indexOf(next);
    if (at < 0) return;
    policies.splice(at, 1);
    if (policies.length) return;
    while (originals.length) originals.pop()!();
    syncBuiltinESMExports();
  };
}
