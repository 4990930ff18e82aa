import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import type { LookupFunction } from "node:net";
import { HttpTargetRefusedError } from "../errors.js";
import { refuseAddress, refusalText, type AddressPolicyOptions } from "./address-policy.js";
import { formatIp, parseIp } from "./ip-address.js";

/**
 * Resolves a host name to every address it has. Injected in tests (a name that answers
 * 127.0.0.1, answers that change between calls to simulate DNS rebinding); by default the
 * system resolver (getaddrinfo), as Node's own connections use.
 */
export type Resolver = (hostname: string) => Promise<LookupAddress[]>;

export const systemResolver: Resolver = (hostname) =>
  new Promise((resolve, reject) => {
    dnsLookup(hostname, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses)));
  });

/**
 * The SSRF guard at connect time: a `lookup` for http(s) requests that resolves the name
 * once, refuses the connection when ANY of the answers is not allowed, and hands the socket
 * exactly the addresses it checked. Because the check and the connect use one answer, a DNS
 * server that answers public first and private later (rebinding) cannot slip a private
 * address in between. A name that is itself a numeric IPv4 in any form (`0x7f.1`) is taken
 * as that address, as getaddrinfo would.
 */
export function guardedLookup(policy: AddressPolicyOptions, resolver: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    const target = hostname;
    checkedAddresses(hostname, policy, resolver).then(
      (list) => {
        const family = options.family === 4 || options.family === "IPv4" ? 4 : options.family === 6 || options.family === "IPv6" ? 6 : 0;
        const usable = family === 0 ? list : list.filter((a) => a.family === family);
        if (usable.length === 0) {
          callback(Object.assign(new Error(`${target} has no IPv${family} address`), { code: "ENOTFOUND" }), "", 0);
        } else if (options.all) {
          callback(null, usable);
        } else {
          callback(null, usable[0]!.address, usable[0]!.family);
        }
      },
      (err: NodeJS.ErrnoException) => callback(err, "", 0),
    );
  };
}

/**
 * RFC 6761: `localhost` and names below it are loopback whatever a resolver says (some
 * resolvers do not know `localhost.` with its trailing dot; the answer must not depend on that).
 */
const LOCALHOST: LookupAddress[] = [
  { address: "127.0.0.1", family: 4 },
  { address: "::1", family: 6 },
];

function isLocalhostName(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, "");
  return h === "localhost" || h.endsWith(".localhost");
}

/**
 * Resolves `hostname` and checks every answer.
 * @throws HttpTargetRefusedError when any answer is refused; the resolver's error when it fails
 */
export async function checkedAddresses(hostname: string, policy: AddressPolicyOptions, resolver: Resolver): Promise<LookupAddress[]> {
  const literal = parseIp(hostname);
  const list: LookupAddress[] = literal
    ? [{ address: formatIp(literal), family: literal.family }]
    : isLocalhostName(hostname)
      ? LOCALHOST
      : await resolver(hostname);
  if (list.length === 0) throw Object.assign(new Error(`${hostname} resolved to no address`), { code: "ENOTFOUND" });
  for (const a of list) {
    const refusal = refuseAddress(a.address, policy);
    if (refusal) throw new HttpTargetRefusedError(hostname, refusalText(refusal, literal ? undefined : hostname));
  }
  return list;
}
