import { domainToASCII } from "node:url";
import { ConfigError } from "../../core/index.js";
import { formatIp, parseIp } from "./ip-address.js";

/**
 * `allow_hosts` / `deny_hosts` entries: an exact host (`api.github.com`, `10.0.0.5`,
 * `[::1]`) or `*.suffix`, which matches every name below the suffix but not the suffix
 * itself (`*.github.com` matches `api.github.com`, not `github.com`: list both when both
 * are meant). Names are compared in their canonical form (lowercase, punycode, no trailing
 * dot; IP literals canonicalised), the form the WHATWG URL parser gives a request's host.
 */
export interface HostPattern {
  readonly written: string;
  matches(host: string): boolean;
}

/**
 * Parses one entry.
 * @throws ConfigError naming `key` when the entry is not a host or `*.suffix`
 */
export function parseHostPattern(written: string, key: string): HostPattern {
  const wildcard = written.startsWith("*.");
  const body = canonicalHost(wildcard ? written.slice(2) : written);
  if (body === undefined || body.includes("*")) {
    throw new ConfigError(key, `${JSON.stringify(written)} is not a host name: write an exact host ("api.github.com") or "*.example.com" for its subdomains`);
  }
  if (wildcard) return { written, matches: (host) => host.endsWith(`.${body}`) };
  return { written, matches: (host) => host === body };
}

/**
 * A host as requests are matched: lowercase ASCII (IDN as punycode), no trailing dot, IP
 * literals in canonical text without brackets. Undefined when it cannot be a host.
 */
export function canonicalHost(host: string): string | undefined {
  let h = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  if (h.endsWith(".")) h = h.slice(0, -1);
  if (h === "") return undefined;
  const ip = parseIp(h);
  if (ip) return formatIp(ip);
  const ascii = domainToASCII(h);
  return ascii === "" ? undefined : ascii;
}

/** The first pattern that matches, if any. */
export function matchHost(patterns: readonly HostPattern[], host: string): HostPattern | undefined {
  const canonical = canonicalHost(host);
  if (canonical === undefined) return undefined;
  return patterns.find((p) => p.matches(canonical));
}
