/**
 * True for a host only this machine can reach: `localhost`, 127.0.0.0/8 and `::1` (with or
 * without the brackets a URL's hostname keeps). Such an address may run without a secret
 * (a gateway with `auth = "none"`, a local model endpoint without an API key); the tools'
 * SSRF policy is a different question and has its own ranges (tools/builtin/address-policy.ts).
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}
