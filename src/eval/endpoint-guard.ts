import { ConfigError, isKovaError } from "../core/index.js";
import { checkedAddresses, systemResolver, ToolsErrorCode, type AddressPolicyOptions, type Resolver } from "../tools/index.js";
import type { EvalTrust } from "./node-trust.js";

/**
 * The SSRF guard for the URLs a spec makes a node call (an external subject's `base_url` or
 * `a2a`): the address policy of http_request (docs/security.md, "Outbound HTTP"), with
 * `[eval] allow_private_endpoints` in place of `tools.http.allow_private`. Whoever may start
 * an experiment writes the spec, and the node stores the endpoint's answer in the record they
 * read, so without it they could read what only the nodes can reach (loopback services,
 * private networks, the cloud metadata endpoint). Checked when the experiment starts and
 * again by the node that runs each cell, since a name may resolve elsewhere by then.
 */
const settings = { allowPrivate: "[eval] allow_private_endpoints = true in the nodes' kova.toml" };

/**
 * Resolves the URL's host and refuses it when any of its addresses is not allowed. A name
 * that does not resolve passes: the call fails on its own, as it would for any endpoint down.
 * @param field the spec's field that names the URL (`subjects[1].a2a`), for the error
 * @throws ConfigError naming the field, the address and the setting that would allow it
 */
export async function checkEndpoint(url: string, trust: EvalTrust, field: string, resolver: Resolver = systemResolver): Promise<void> {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    throw new ConfigError(field, `must be an http(s) URL, not ${JSON.stringify(url)}`);
  }
  const policy: AddressPolicyOptions = { allowPrivate: trust.allowPrivateEndpoints, settings };
  try {
    await checkedAddresses(host, policy, resolver);
  } catch (err) {
    if (!isKovaError(err, ToolsErrorCode.HTTP_TARGET_REFUSED)) return;
    const reason = (err.data as { reason?: string } | undefined)?.reason ?? err.message;
    throw new ConfigError(field, `${url} is refused: ${reason}`, { cause: err });
  }
}
