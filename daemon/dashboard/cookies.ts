// The two cookies the dashboard sets. The session cookie is HttpOnly (page scripts never see it) and SameSite=Strict
// (no other site's page can make the browser send it); the CSRF cookie is readable by the page, which echoes it in
// a header: a page from elsewhere can neither read it nor set that header. Over HTTPS both carry the __Host- prefix,
// so a sibling subdomain cannot plant a cookie of the same name that the browser would send first.

export interface CookieNames {
  session: string;
  csrf: string;
}

export function cookieNames(secure: boolean): CookieNames {
  return secure ? { session: '__Host-sov_session', csrf: '__Host-sov_csrf' } : { session: 'sov_session', csrf: 'sov_csrf' };
}

export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!header) return out;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const name = part.slice(0, eq).trim();
    if (name && !out.has(name)) out.set(name, part.slice(eq + 1).trim());
  }
  return out;
}

export interface CookieOptions {
  /** Secure everywhere except plain HTTP on loopback (the device posture), where browsers would drop it. */
  secure: boolean;
  httpOnly: boolean;
  /** Seconds; 0 removes the cookie. */
  maxAge: number;
}

export function serializeCookie(name: string, value: string, options: CookieOptions): string {
  const parts = [`${name}=${value}`, 'Path=/', 'SameSite=Strict', `Max-Age=${options.maxAge}`];
  if (options.httpOnly) parts.push('HttpOnly');
  if (options.secure) parts.push('Secure');
  return parts.join('; ');
}
