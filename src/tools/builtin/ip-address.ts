import { isIPv6 } from "node:net";

/**
 * IP address parsing for the SSRF guard. IPv4 is parsed the way both the WHATWG URL parser
 * and the C library's inet_aton (behind getaddrinfo) read a host: one to four parts, each
 * decimal, octal (leading 0) or hex (0x), the last part filling the remaining bytes, so
 * `2130706433`, `0177.0.0.1`, `0x7f.1` and `127.1` are all 127.0.0.1. A guard that only
 * knew dotted quads would let those through to a resolver that connects to loopback.
 */

/** An address as 4 or 16 bytes. */
export interface IpAddress {
  family: 4 | 6;
  bytes: Uint8Array;
}

/**
 * Parses any numeric IPv4 form, or returns undefined when `host` is not one (a name).
 * One trailing dot is allowed, as both parsers allow it.
 */
export function parseIPv4(host: string): IpAddress | undefined {
  const text = host.endsWith(".") ? host.slice(0, -1) : host;
  const parts = text.split(".");
  if (parts.length === 0 || parts.length > 4) return undefined;
  const values: number[] = [];
  for (const part of parts) {
    const v = parsePart(part);
    if (v === undefined) return undefined;
    values.push(v);
  }
  const last = values.pop()!;
  if (values.some((v) => v > 255)) return undefined;
  if (last >= 256 ** (4 - values.length)) return undefined;
  let n = last;
  values.forEach((v, i) => {
    n += v * 256 ** (3 - i);
  });
  return { family: 4, bytes: Uint8Array.of(n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255) };
}

function parsePart(part: string): number | undefined {
  let digits = part;
  let radix = 10;
  if (/^0[xX]/.test(part)) {
    digits = part.slice(2);
    radix = 16;
    if (digits === "") return 0; // "0x" alone is 0 to both parsers
  } else if (part.length > 1 && part.startsWith("0")) {
    digits = part.slice(1);
    radix = 8;
  }
  const valid = radix === 16 ? /^[0-9a-fA-F]+$/ : radix === 8 ? /^[0-7]+$/ : /^[0-9]+$/;
  if (!valid.test(digits)) return undefined;
  const v = Number.parseInt(digits, radix);
  // Larger than 2^32 cannot be an address in any position.
  return Number.isSafeInteger(v) && v <= 0xffffffff ? v : undefined;
}

/**
 * Parses an IPv6 literal (with or without brackets and zone id, with an embedded dotted
 * IPv4 tail such as `::ffff:127.0.0.1`), or returns undefined.
 */
export function parseIPv6(host: string): IpAddress | undefined {
  let text = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  const zone = text.indexOf("%");
  if (zone >= 0) text = text.slice(0, zone);
  if (!isIPv6(text)) return undefined;
  const words: number[] = [];
  const [head, tail] = text.includes("::") ? text.split("::") : [text, undefined];
  const parseGroups = (s: string): number[] => {
    if (s === "") return [];
    const out: number[] = [];
    for (const g of s.split(":")) {
      if (g.includes(".")) {
        const v4 = parseDottedQuad(g)!;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else {
        out.push(Number.parseInt(g, 16));
      }
    }
    return out;
  };
  const a = parseGroups(head!);
  const b = tail === undefined ? [] : parseGroups(tail);
  words.push(...a, ...new Array<number>(8 - a.length - b.length).fill(0), ...b);
  const bytes = new Uint8Array(16);
  words.forEach((w, i) => {
    bytes[2 * i] = w >> 8;
    bytes[2 * i + 1] = w & 255;
  });
  return { family: 6, bytes };
}

/** Strict dotted quad (inside IPv6, only this form is valid). */
function parseDottedQuad(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) return undefined;
  return parts.map(Number);
}

/** Either family, from a literal or a resolver's answer; undefined for a name. */
export function parseIp(host: string): IpAddress | undefined {
  return parseIPv6(host) ?? parseIPv4(host);
}

/** Canonical text: dotted quad, or RFC 5952 IPv6 (`::ffff:7f00:1`). */
export function formatIp(ip: IpAddress): string {
  if (ip.family === 4) return Array.from(ip.bytes).join(".");
  const words = Array.from({ length: 8 }, (_, i) => (ip.bytes[2 * i]! << 8) | ip.bytes[2 * i + 1]!);
  // The longest run of two or more zero words becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = words.map((w) => w.toString(16));
  if (best < 0) return hex.join(":");
  return `${hex.slice(0, best).join(":")}::${hex.slice(best + bestLen).join(":")}`;
}

/** The IPv4 address stored in four bytes of an IPv6 address, starting at `offset`. */
export function embeddedIPv4(ip: IpAddress, offset: number, invert = false): IpAddress {
  const b = ip.bytes.slice(offset, offset + 4);
  if (invert) for (let i = 0; i < 4; i++) b[i] = ~b[i]! & 255;
  return { family: 4, bytes: b };
}

/** Whether `ip` lies in `prefix/bits` (same family). */
export function inPrefix(ip: IpAddress, prefix: IpAddress, bits: number): boolean {
  if (ip.family !== prefix.family) return false;
  let left = bits;
  for (let i = 0; left > 0; i++, left -= 8) {
    const mask = left >= 8 ? 0xff : (0xff << (8 - left)) & 0xff;
    if ((ip.bytes[i]! & mask) !== (prefix.bytes[i]! & mask)) return false;
  }
  return true;
}

/** A CIDR block, e.g. `10.0.0.0/8`, `fc00::/7`, or a single address. */
export interface Cidr {
  prefix: IpAddress;
  bits: number;
  text: string;
}

/** Parses `addr/bits` (bits defaults to the full length); undefined when malformed. */
export function parseCidr(text: string): Cidr | undefined {
  const slash = text.indexOf("/");
  const addrText = slash >= 0 ? text.slice(0, slash) : text;
  const prefix = parseIPv6(addrText) ?? (/^\d{1,3}(\.\d{1,3}){3}$/.test(addrText) ? parseIPv4(addrText) : undefined);
  if (!prefix) return undefined;
  const max = prefix.family === 4 ? 32 : 128;
  const bits = slash >= 0 ? Number(text.slice(slash + 1)) : max;
  if (!Number.isInteger(bits) || bits < 0 || bits > max || (slash >= 0 && !/^\d+$/.test(text.slice(slash + 1)))) return undefined;
  return { prefix, bits, text };
}
