import { embeddedIPv4, formatIp, inPrefix, parseIp, type Cidr, type IpAddress } from "./ip-address.js";

/**
 * Which addresses http_request may connect to. Three classes:
 * - `private`: loopback, RFC 1918, CGNAT, link-local, unique-local and site-local. Refused
 *   unless `allow_private` (tests, intranets) or an `allow_cidrs` entry covers them.
 * - `reserved`: multicast, broadcast, documentation, benchmarking, IETF and future-use
 *   blocks, and IPv6 outside global unicast (2000::/3). Nothing legitimate is served
 *   there; only an explicit `allow_cidrs` entry lifts them.
 * - `forbidden`: the unspecified address (0.0.0.0/8 and ::, which Linux connects to the
 *   local host) and cloud metadata endpoints. Never reachable: no intranet use needs them,
 *   and they are the first thing an injected prompt asks for.
 * IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) are
 * judged by the IPv4 address inside, so `::ffff:127.0.0.1` is loopback.
 */
export type AddressClass = "public" | "private" | "reserved" | "forbidden";

export interface AddressVerdict {
  readonly class: AddressClass;
  /** What the address is, with its article, for messages (`a loopback address`). */
  readonly kind: string;
}

interface Block {
  cidr: string;
  class: Exclude<AddressClass, "public">;
  kind: string;
}

const V4_BLOCKS: Block[] = [
  { cidr: "169.254.169.254/32", class: "forbidden", kind: "a cloud metadata endpoint" },
  { cidr: "169.254.170.2/32", class: "forbidden", kind: "a cloud metadata endpoint (ECS)" },
  { cidr: "169.254.169.253/32", class: "forbidden", kind: "a cloud DNS/metadata endpoint" },
  { cidr: "100.100.100.200/32", class: "forbidden", kind: "a cloud metadata endpoint (Alibaba)" },
  { cidr: "0.0.0.0/8", class: "forbidden", kind: "an unspecified/this-network address (reaches the local host)" },
  { cidr: "127.0.0.0/8", class: "private", kind: "a loopback address" },
  { cidr: "10.0.0.0/8", class: "private", kind: "a private address (10/8)" },
  { cidr: "172.16.0.0/12", class: "private", kind: "a private address (172.16/12)" },
  { cidr: "192.168.0.0/16", class: "private", kind: "a private address (192.168/16)" },
  { cidr: "100.64.0.0/10", class: "private", kind: "a carrier-grade NAT address (100.64/10)" },
  { cidr: "169.254.0.0/16", class: "private", kind: "a link-local address" },
  { cidr: "192.0.0.0/24", class: "reserved", kind: "an IETF protocol assignment" },
  { cidr: "192.0.2.0/24", class: "reserved", kind: "a documentation address" },
  { cidr: "198.51.100.0/24", class: "reserved", kind: "a documentation address" },
  { cidr: "203.0.113.0/24", class: "reserved", kind: "a documentation address" },
  { cidr: "192.88.99.0/24", class: "reserved", kind: "a 6to4 relay anycast address" },
  { cidr: "198.18.0.0/15", class: "reserved", kind: "a benchmarking address" },
  { cidr: "255.255.255.255/32", class: "reserved", kind: "a broadcast address" },
  { cidr: "224.0.0.0/4", class: "reserved", kind: "a multicast address" },
  { cidr: "240.0.0.0/4", class: "reserved", kind: "a reserved address (240/4)" },
];

const V6_BLOCKS: Block[] = [
  { cidr: "fd00:ec2::254/128", class: "forbidden", kind: "a cloud metadata endpoint" },
  { cidr: "::/128", class: "forbidden", kind: "an unspecified address (reaches the local host)" },
  { cidr: "::1/128", class: "private", kind: "a loopback address" },
  { cidr: "64:ff9b:1::/48", class: "private", kind: "a local-use NAT64 address" },
  { cidr: "fc00::/7", class: "private", kind: "a unique-local address" },
  { cidr: "fe80::/10", class: "private", kind: "a link-local address" },
  { cidr: "fec0::/10", class: "private", kind: "a site-local address" },
  { cidr: "ff00::/8", class: "reserved", kind: "a multicast address" },
  { cidr: "100::/64", class: "reserved", kind: "a discard-only address" },
  { cidr: "2001:db8::/32", class: "reserved", kind: "a documentation address" },
  { cidr: "2001:2::/48", class: "reserved", kind: "a benchmarking address" },
  { cidr: "2001:10::/28", class: "reserved", kind: "an ORCHID address" },
  { cidr: "2001:20::/28", class: "reserved", kind: "an ORCHIDv2 address" },
];

const compiled = (blocks: Block[]) =>
  blocks.map((b) => {
    const [addr, bits] = b.cidr.split("/");
    return { ...b, prefix: parseIp(addr!)!, bits: Number(bits) };
  });
const V4 = compiled(V4_BLOCKS);
const V6 = compiled(V6_BLOCKS);

const prefix6 = (text: string): IpAddress => parseIp(text)!;
const MAPPED = prefix6("::ffff:0:0");
const TRANSLATED = prefix6("::ffff:0:0:0"); // SIIT, RFC 2765
const NAT64 = prefix6("64:ff9b::");
const COMPATIBLE = prefix6("::"); // deprecated IPv4-compatible ::a.b.c.d
const SIX_TO_FOUR = prefix6("2002::");
const TEREDO = prefix6("2001::");
const GLOBAL_UNICAST = prefix6("2000::");

/** Classifies one address. */
export function classifyAddress(ip: IpAddress): AddressVerdict {
  if (ip.family === 4) {
    for (const b of V4) if (inPrefix(ip, b.prefix, b.bits)) return { class: b.class, kind: b.kind };
    return { class: "public", kind: "a public address" };
  }
  for (const b of V6) if (inPrefix(ip, b.prefix, b.bits)) return { class: b.class, kind: b.kind };
  // IPv6 that carries IPv4: judge the IPv4 inside (a dual-stack socket connects to it).
  if (inPrefix(ip, MAPPED, 96) || inPrefix(ip, TRANSLATED, 96) || inPrefix(ip, NAT64, 96) || inPrefix(ip, COMPATIBLE, 96)) {
    return embedded(classifyAddress(embeddedIPv4(ip, 12)), "an IPv4-embedding IPv6 address");
  }
  if (inPrefix(ip, SIX_TO_FOUR, 16)) return embedded(classifyAddress(embeddedIPv4(ip, 2)), "a 6to4 address");
  if (inPrefix(ip, TEREDO, 32)) {
    const server = classifyAddress(embeddedIPv4(ip, 4));
    if (server.class !== "public") return embedded(server, "a Teredo address (server part)");
    return embedded(classifyAddress(embeddedIPv4(ip, 12, true)), "a Teredo address (client part)");
  }
  if (!inPrefix(ip, GLOBAL_UNICAST, 3)) return { class: "reserved", kind: "an IPv6 address outside global unicast (2000::/3)" };
  return { class: "public", kind: "a public address" };
}

function embedded(inner: AddressVerdict, how: string): AddressVerdict {
  return inner.class === "public" ? inner : { class: inner.class, kind: `${inner.kind} inside ${how}` };
}

export interface AddressPolicyOptions {
  /** Lift the refusal of private addresses (loopback, RFC 1918, link-local, ...). */
  allowPrivate?: boolean;
  /** Blocks that are reachable whatever their class, except `forbidden` addresses. */
  allowCidrs?: readonly Cidr[];
  /**
   * The settings refusals name as the way to lift them (default: http_request's,
   * `tools.http.allow_private` and `tools.http.allow_cidrs`); without `allowCidrs`, reserved
   * addresses are always refused.
   */
  settings?: { allowPrivate: string; allowCidrs?: string };
}

const HTTP_TOOL_SETTINGS = { allowPrivate: "tools.http.allow_private", allowCidrs: "tools.http.allow_cidrs" };

/** Why an address is refused. */
export interface AddressRefusal {
  /** Canonical text of the address. */
  readonly address: string;
  /** What it is, with its article (`a loopback address`). */
  readonly kind: string;
  /** What would make it reachable, if anything. */
  readonly rule: string;
}

/**
 * Decides one address.
 * @returns undefined when allowed, else why not
 */
export function refuseAddress(address: string | IpAddress, options: AddressPolicyOptions): AddressRefusal | undefined {
  const ip = typeof address === "string" ? parseIp(address) : address;
  if (!ip) return { address: String(address), kind: "not an IP address", rule: "a resolver must answer IP addresses" };
  const verdict = classifyAddress(ip);
  const text = formatIp(ip);
  if (verdict.class === "public") return undefined;
  if (verdict.class === "forbidden") return { address: text, kind: verdict.kind, rule: "always refused" };
  if (options.allowCidrs?.some((c) => inPrefix(ip, c.prefix, c.bits) || inMappedPrefix(ip, c))) return undefined;
  const settings = options.settings ?? HTTP_TOOL_SETTINGS;
  if (verdict.class === "private") {
    if (options.allowPrivate) return undefined;
    return {
      address: text,
      kind: verdict.kind,
      rule: `private networks are refused unless the operator sets ${settings.allowPrivate}${settings.allowCidrs ? ` or lists the block in ${settings.allowCidrs}` : ""}`,
    };
  }
  return {
    address: text,
    kind: verdict.kind,
    rule: settings.allowCidrs ? `refused unless the operator lists the block in ${settings.allowCidrs}` : "always refused",
  };
}

/** The refusal as a sentence; `hostname` when the address came from resolving a name. */
export function refusalText(r: AddressRefusal, hostname?: string): string {
  return `${hostname === undefined ? `${r.address} is` : `${hostname} resolves to ${r.address},`} ${r.kind}: ${r.rule}`;
}

/** `::ffff:10.0.0.5` is covered by an IPv4 block `10.0.0.0/8`. */
function inMappedPrefix(ip: IpAddress, c: Cidr): boolean {
  return ip.family === 6 && c.prefix.family === 4 && inPrefix(ip, MAPPED, 96) && inPrefix(embeddedIPv4(ip, 12), c.prefix, c.bits);
}
