import { readFileSync } from "node:fs";
import { credsAuthenticator, nkeyAuthenticator, type Authenticator, type ConnectionOptions } from "@nats-io/transport-node";

/**
 * How a process proves who it is to NATS, and over what. Values, not where they came from:
 * the config layer reads secrets from files or environment variables it names (never from
 * the config text) and hands them over here. Nothing in this object is ever logged.
 */
export interface NatsSecurity {
  user?: string;
  password?: string;
  token?: string;
  /** An NKey seed (`SU…`). */
  nkeySeed?: string;
  /** Path of a `.creds` file (JWT + NKey seed), as `nsc` writes it. */
  credsFile?: string;
  tls?: {
    /** CA bundle to verify the server with (PEM). */
    caFile?: string;
    /** Client certificate and key for mutual TLS (PEM). */
    certFile?: string;
    keyFile?: string;
  };
  /**
   * Prefix of this connection's reply inboxes (default `_INBOX`). Accounts with least
   * privilege often grant each client its own, e.g. `_INBOX_billing`.
   */
  inboxPrefix?: string;
}

const enc = new TextEncoder();

/**
 * The nats.js connect options for `sec`.
 * @throws Error (ENOENT etc.) when the creds file cannot be read
 */
export function securityOptions(sec: NatsSecurity | undefined): Partial<ConnectionOptions> {
  if (!sec) return {};
  const out: Partial<ConnectionOptions> = {};
  const authenticators: Authenticator[] = [];
  if (sec.user !== undefined) {
    out.user = sec.user;
    if (sec.password !== undefined) out.pass = sec.password;
  }
  if (sec.token !== undefined) out.token = sec.token;
  if (sec.nkeySeed !== undefined) authenticators.push(nkeyAuthenticator(enc.encode(sec.nkeySeed.trim())));
  if (sec.credsFile !== undefined) {
    // Read once now, so a missing file fails the start with its path, not a reconnect later.
    authenticators.push(credsAuthenticator(readFileSync(sec.credsFile)));
  }
  if (authenticators.length > 0) out.authenticator = authenticators;
  if (sec.tls && (sec.tls.caFile || sec.tls.certFile || sec.tls.keyFile)) {
    out.tls = {
      ...(sec.tls.caFile ? { caFile: sec.tls.caFile } : {}),
      ...(sec.tls.certFile ? { certFile: sec.tls.certFile } : {}),
      ...(sec.tls.keyFile ? { keyFile: sec.tls.keyFile } : {}),
    };
  }
  if (sec.inboxPrefix !== undefined) out.inboxPrefix = sec.inboxPrefix;
  return out;
}

/**
 * `url` with `nats://` in front when it has no scheme. nats.js connects to `host:port`,
 * and so to `user:pass@host:port`, as `nats://…`; read without the scheme, `new URL()`
 * takes `user:` for the scheme and the password for a path, so user info would pass
 * every check below unseen and be echoed in errors and logs.
 */
function withScheme(url: string): string {
  const t = url.trim();
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(t) ? t : `nats://${t}`;
}

/** Whether a server URL carries user info (`nats://user:pass@host`, `token@host:4222`). */
export function urlHasCredentials(url: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\/[^/@]*@/i.test(withScheme(url));
}

/**
 * A server URL fit for logs, status replies and errors: user info (`nats://user:pass@…`,
 * `nats://token@…`, `user:pass@host:port`) is replaced by `***`, and a URL without a
 * scheme comes back with `nats://`. Anything that does not parse as a URL is returned
 * with everything before an `@` masked.
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(withScheme(url));
    if (u.username === "" && u.password === "") return url;
    u.username = "***";
    u.password = "";
    return u.toString().replace(/\/$/, "");
  } catch {
    const at = url.lastIndexOf("@");
    return at < 0 ? url : `***${url.slice(at)}`;
  }
}

/**
 * Takes credentials out of server URLs (`nats://user:pass@host`, `nats://token@host`,
 * `user:pass@host:port`, as in NATS_URL) and into the security options, where nats.js
 * uses them and nothing logs them. Explicit options win over URL user info.
 */
export function credentialsFromUrls(urls: readonly string[], sec: NatsSecurity | undefined): { servers: string[]; security: NatsSecurity | undefined } {
  let found: { user: string; password: string } | undefined;
  const servers = urls.map((url) => {
    try {
      const u = new URL(withScheme(url));
      if (u.username === "" && u.password === "") return url;
      found ??= { user: decodeURIComponent(u.username), password: decodeURIComponent(u.password) };
      u.username = "";
      u.password = "";
      return u.toString().replace(/\/$/, "");
    } catch {
      return url;
    }
  });
  if (!found || sec?.user !== undefined || sec?.token !== undefined || sec?.nkeySeed !== undefined || sec?.credsFile !== undefined) {
    return { servers, security: sec };
  }
  const fromUrl: NatsSecurity = found.password === "" ? { token: found.user } : { user: found.user, password: found.password };
  return { servers, security: { ...sec, ...fromUrl } };
}

export function redactUrls(urls: readonly string[]): string[] {
  return urls.map(redactUrl);
}
