// What an IP address is by its range: loopback, private (the internal networks: RFC 1918, CGNAT, IPv6 unique local),
// link-local, multicast, unspecified, or public. The egress guard judges and counts destinations by it, and the
// configuration checks by it that a sealed posture's upstreams are inside.

/** An IP address's range; anything that is not an address of another range is public. */
export type AddressKind = 'loopback' | 'private' | 'link_local' | 'multicast' | 'unspecified' | 'public';

function ipv4Parts(address: string): number[] | null {
  const parts = address.split('.').map(Number);
  return parts.length === 4 && parts.every((p) => Number.isInteger(p) && p >= 0 && p <= 255) ? parts : null;
}

/**
 * The range `address` is in: an IPv4 or IPv6 address, bracketed or not, an IPv4-mapped one by its IPv4 address. A
 * name is not resolved: it MUST be judged by the caller (it comes out public).
 */
export function addressKind(address: string): AddressKind {
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
