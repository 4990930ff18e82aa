import { realpathSync } from "node:fs";
import { isAbsolute, resolve, sep } from "node:path";
import { boolValue, ConfigError, describeValue, optionalTable, rejectUnknown, stringList, tableAt, type ConfigTable } from "../core/index.js";

/**
 * What a node lets experiments use of its own environment and file system: kova.toml's
 * `[eval]` (docs/evals.md, "What a spec may read on the nodes"; docs/security.md,
 * "Experiments"). A spec comes from whoever may start experiments, and runs on the nodes:
 * an external subject's `api_key_env` or `headers_env` names a variable of the node that
 * calls it, and its value goes to the URL the spec names; a code verifier's `module` is
 * imported on the node; an external subject's URL is called from the node, which reaches
 * addresses the one who starts the experiment may not. So the node reads only what its own
 * config lists, and nothing by default, and calls no private address unless it allows them:
 *
 * ```toml
 * [eval]
 * verifier_dirs = ["./verifiers"]      # code verifiers are imported from under these directories only
 * allow_private_endpoints = false      # true: external subjects may be on loopback and private networks
 *
 * [eval.env]                           # variables experiments may name, each with where its value may go
 * OPENAI_API_KEY = "https://api.openai.com/v1"
 * A2A_TOKEN = ["https://agents.example.com/a2a", "https://agents.example.com/v2/a2a"]
 * ```
 */
export interface EvalTrust {
  /** Environment variable → the endpoints (URL prefixes) its value may be sent to. */
  env: ReadonlyMap<string, readonly URL[]>;
  /** Absolute directories a code verifier's module must lie under (symbolic links resolved). */
  verifierDirs: readonly string[];
  /**
   * Whether external subjects may be on loopback, private and link-local addresses
   * (docs/security.md, "Experiments"); cloud metadata endpoints stay refused regardless.
   */
  allowPrivateEndpoints: boolean;
}

/** A node without `[eval]`: experiments read no variable of it and import no code verifier. */
export const NO_EVAL_TRUST: EvalTrust = { env: new Map(), verifierDirs: [], allowPrivateEndpoints: false };

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Reads the `[eval]` table of a parsed kova.toml.
 * @param baseDir anchors relative `verifier_dirs` (the config file's directory)
 * @throws ConfigError naming the key as written (`eval.env.OPENAI_API_KEY[1]`) and the fix
 */
export function evalTrustFrom(raw: unknown, baseDir: string): EvalTrust {
  if (raw === undefined) return NO_EVAL_TRUST;
  const t = tableAt(raw, "eval");
  rejectUnknown(t, ["env", "verifier_dirs", "allow_private_endpoints"], "eval.");
  const env = new Map<string, URL[]>();
  for (const [name, value] of Object.entries(optionalTable(t as ConfigTable, "env", "eval.env"))) {
    const key = `eval.env.${name}`;
    if (!ENV_NAME.test(name)) throw new ConfigError(key, "must be an environment variable's name ([A-Za-z_][A-Za-z0-9_]*)");
    const urls = typeof value === "string" ? [value] : stringList(value, key, '["https://api.openai.com/v1"]');
    if (urls === undefined || urls.length === 0) {
      throw new ConfigError(key, `must name the endpoint its value may be sent to, e.g. ${name} = "https://api.openai.com/v1", not ${describeValue(value)}`);
    }
    env.set(
      name,
      urls.map((u, i) => endpointAt(u, typeof value === "string" ? key : `${key}[${i}]`)),
    );
  }
  const dirs = stringList(t.verifier_dirs, "eval.verifier_dirs", '["./verifiers"]') ?? [];
  return {
    env,
    verifierDirs: dirs.map((d) => (isAbsolute(d) ? resolve(d) : resolve(baseDir, d))),
    allowPrivateEndpoints: boolValue(t.allow_private_endpoints, "eval.allow_private_endpoints") ?? false,
  };
}

function endpointAt(raw: string, key: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(key, `must be an http(s) URL, not ${JSON.stringify(raw)}`);
  }
  if ((url.protocol !== "https:" && url.protocol !== "http:") || url.username || url.password || url.search || url.hash) {
    throw new ConfigError(key, `must be an http(s) URL without credentials, query or fragment, not ${JSON.stringify(raw)}`);
  }
  return url;
}

/** Whether `target` is at or under `allowed`: the same origin, and its path the same or below it by whole segments. */
function endpointCovers(allowed: URL, target: URL): boolean {
  if (allowed.origin !== target.origin) return false;
  const base = allowed.pathname.replace(/\/+$/, "");
  const path = target.pathname.replace(/\/+$/, "");
  return path === base || path.startsWith(`${base}/`);
}

/**
 * The value of an environment variable a spec names, for a request to `url`, if this node's
 * `[eval.env]` lets it go there.
 * @param field the spec's field that names it (`subjects[2].openai.api_key_env`), for the error
 * @param urlField the spec's field that names the URL
 * @throws ConfigError naming the field and the fix when the variable is not listed, not for
 *   that URL, or not set on this node
 */
export function trustedEnvValue(trust: EvalTrust, name: string, url: string, field: string, urlField: string, env: NodeJS.ProcessEnv = process.env): string {
  const allowed = trust.env.get(name);
  if (allowed === undefined) {
    throw new ConfigError(
      field,
      `${JSON.stringify(name)} is not a variable this node lets experiments read: a spec may name only the variables listed in [eval.env] of the nodes' kova.toml (${[...trust.env.keys()].join(", ") || "none"}), each with the endpoints its value may go to; to allow it, add ${ENV_NAME.test(name) ? name : '"<name>"'} = "${originOf(url)}" under [eval.env] on every node (whoever may start experiments can then send its value to that endpoint)`,
      { data: { variable: name } },
    );
  }
  let target: URL | undefined;
  try {
    target = new URL(url);
  } catch {
    target = undefined;
  }
  if (target === undefined || !allowed.some((a) => endpointCovers(a, target))) {
    throw new ConfigError(
      urlField,
      `${url} is not an endpoint [eval.env] lets ${name} go to (it allows ${allowed.map((a) => a.href).join(", ")}): use one of those, or add this endpoint to ${name} under [eval.env] on every node`,
      { data: { variable: name, url } },
    );
  }
  const value = env[name];
  if (!value) throw new ConfigError(field, `environment variable ${name} is not set on this node: set it on every node that runs experiments`);
  return value;
}

function originOf(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname.replace(/\/+$/, "")}`;
  } catch {
    return "<endpoint>";
  }
}

/**
 * Checks that a code verifier's module lies under one of `[eval] verifier_dirs` (symbolic
 * links resolved, so a link inside cannot point out).
 * @returns the module's real path, the one to import
 * @throws ConfigError naming the field and the fix when it does not, or does not exist here
 */
export function trustedVerifierModule(trust: EvalTrust, module: string, field: string): string {
  if (trust.verifierDirs.length === 0) {
    throw new ConfigError(
      field,
      `this node imports no code verifier: a code verifier runs on the nodes with their powers, so they import modules only from under the directories [eval] verifier_dirs lists in their kova.toml (none here); put ${module} in such a directory on every node and list it there`,
    );
  }
  let real: string;
  try {
    real = realpathSync(module);
  } catch {
    throw new ConfigError(field, `${module} does not exist on this node: install it under ${trust.verifierDirs.join(" or ")} on every node`);
  }
  const under = trust.verifierDirs.some((d) => {
    let dir: string;
    try {
      dir = realpathSync(d);
    } catch {
      return false;
    }
    return real.startsWith(dir.endsWith(sep) ? dir : `${dir}${sep}`);
  });
  if (!under) {
    throw new ConfigError(
      field,
      `${module} is not under a directory this node imports code verifiers from ([eval] verifier_dirs: ${trust.verifierDirs.join(", ")}): put it there on every node, or list its directory in verifier_dirs`,
    );
  }
  return real;
}
