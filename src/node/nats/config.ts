import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { ConfigError, rejectUnknown, stringList, stringValue, tableAt, type ConfigTable } from "../../core/index.js";
import type { NatsSecurity, SenderTrust } from "../../bus/index.js";

/** The `[nats]` keys about identity and transport security (urls and replicas are parsed in config.ts). */
export const NATS_SECURITY_KEYS = [
  "user",
  "password",
  "password_env",
  "password_file",
  "token",
  "token_env",
  "token_file",
  "nkey_seed",
  "nkey_seed_env",
  "nkey_seed_file",
  "creds_file",
  "tls",
  "inbox_prefix",
  "reply_prefixes",
  "trusted_accounts",
  "client_inbox_prefix",
] as const;

const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+$/;

/**
 * Reads `[nats]` credentials and TLS:
 *
 * ```toml
 * [nats]
 * user = "kova-node"
 * password_env = "KOVA_NATS_PASSWORD"      # or password_file = "/run/secrets/nats-password"
 * # token_env / token_file, nkey_seed_env / nkey_seed_file, or:
 * creds_file = "/etc/kova/node.creds"      # JWT + seed, as `nsc` writes it
 * tls = { ca_file = "ca.pem", cert_file = "node.pem", key_file = "node-key.pem" }
 * inbox_prefix = "_INBOX_kova"             # this process's reply inboxes
 * reply_prefixes = ["_INBOX_billing"]      # clients' inbox prefixes a node may reply to
 * trusted_accounts = ["OPERATOR", "GATEWAY"]  # accounts whose users act for others; every
 *                                          #   other account's users are bus principals
 * client_inbox_prefix = "_INBOX_client"    # a bus principal (user U) gets replies under <prefix>.U
 * ```
 *
 * Secrets come only from an environment variable or a file the config names: a secret
 * written in the file itself is refused, because config files end up in repositories,
 * tickets and `ps` output of tools that print them.
 * @param base directory that relative paths are relative to (the config file's)
 * @throws ConfigError naming the key and the fix
 */
export function natsSecurityFrom(
  nats: ConfigTable,
  base: string,
  env: NodeJS.ProcessEnv,
): { security?: NatsSecurity; replyPrefixes?: string[]; senders?: SenderTrust } {
  const sec: NatsSecurity = {};
  const user = stringValue(nats.user, "nats.user");
  if (user !== undefined) sec.user = user;
  const password = secret(nats, "password", base, env);
  if (password !== undefined) {
    if (user === undefined) throw new ConfigError("nats.password_env", 'a password needs a user: add user = "..." to [nats]');
    sec.password = password;
  }
  const token = secret(nats, "token", base, env);
  if (token !== undefined) sec.token = token;
  const seed = secret(nats, "nkey_seed", base, env);
  if (seed !== undefined) {
    if (!/^S[A-Z2-7]{57}$/.test(seed.trim()))
      throw new ConfigError(keyOf(nats, "nkey_seed"), "does not hold an NKey seed (58 characters starting with S, as `nsc` or `nk -gen user` prints it)");
    sec.nkeySeed = seed.trim();
  }
  const creds = stringValue(nats.creds_file, "nats.creds_file");
  if (creds !== undefined) sec.credsFile = readablePath(creds, "nats.creds_file", base);
  if (nats.tls !== undefined) {
    const t = tableAt(nats.tls, "nats.tls");
    rejectUnknown(t, ["ca_file", "cert_file", "key_file"], "nats.tls.");
    const tls: NonNullable<NatsSecurity["tls"]> = {};
    for (const [k, field] of [
      ["ca_file", "caFile"],
      ["cert_file", "certFile"],
      ["key_file", "keyFile"],
    ] as const) {
      const p = stringValue(t[k], `nats.tls.${k}`);
      if (p !== undefined) tls[field] = readablePath(p, `nats.tls.${k}`, base);
    }
    if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
      throw new ConfigError("nats.tls", "cert_file and key_file go together (mutual TLS needs both); give both or neither");
    }
    sec.tls = tls;
  }
  const inbox = stringValue(nats.inbox_prefix, "nats.inbox_prefix");
  if (inbox !== undefined) sec.inboxPrefix = inboxPrefix(inbox, "nats.inbox_prefix");
  const replyPrefixes = stringList(nats.reply_prefixes, "nats.reply_prefixes", '["_INBOX_billing"]', inboxPrefix);
  const trustedAccounts = stringList(nats.trusted_accounts, "nats.trusted_accounts", '["OPERATOR", "GATEWAY"]', (a, k) => {
    if (!/^[A-Za-z0-9_-]+$/.test(a)) throw new ConfigError(k, `must be a NATS account name such as "GATEWAY", not ${JSON.stringify(a)}`);
    return a;
  });
  const clientInbox = stringValue(nats.client_inbox_prefix, "nats.client_inbox_prefix");
  const senders: SenderTrust = {
    ...(trustedAccounts ? { trustedAccounts } : {}),
    ...(clientInbox !== undefined ? { clientInboxPrefix: inboxPrefix(clientInbox, "nats.client_inbox_prefix") } : {}),
  };
  return {
    ...(Object.keys(sec).length > 0 ? { security: sec } : {}),
    ...(replyPrefixes ? { replyPrefixes } : {}),
    ...(Object.keys(senders).length > 0 ? { senders } : {}),
  };
}

/** `<name>_env` or `<name>_file`; `<name>` itself (the secret in the file) is refused. */
function secret(t: ConfigTable, name: string, base: string, env: NodeJS.ProcessEnv): string | undefined {
  if (t[name] !== undefined) {
    throw new ConfigError(
      `nats.${name}`,
      `secrets are not read from the config file: put it in an environment variable and write ${name}_env = "VAR", or in a file and write ${name}_file = "/path"`,
    );
  }
  const envName = stringValue(t[`${name}_env`], `nats.${name}_env`);
  const file = stringValue(t[`${name}_file`], `nats.${name}_file`);
  if (envName !== undefined && file !== undefined) throw new ConfigError(`nats.${name}_env`, `give ${name}_env or ${name}_file, not both`);
  if (envName !== undefined) {
    const value = env[envName];
    if (!value) throw new ConfigError(`nats.${name}_env`, `environment variable ${envName} is not set: export it before starting the node`);
    return value;
  }
  if (file !== undefined) {
    const path = readablePath(file, `nats.${name}_file`, base);
    const value = readFileSync(path, "utf8").replace(/\r?\n$/, "");
    if (value.length === 0) throw new ConfigError(`nats.${name}_file`, `${path} is empty`);
    return value;
  }
  return undefined;
}

function keyOf(t: ConfigTable, name: string): string {
  return t[`${name}_env`] !== undefined ? `nats.${name}_env` : `nats.${name}_file`;
}

function readablePath(p: string, key: string, base: string): string {
  const path = resolve(base, p);
  try {
    readFileSync(path, { flag: "r" });
  } catch (err) {
    throw new ConfigError(key, `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)}): check the path and its permissions`, {
      cause: err,
    });
  }
  return path;
}

function inboxPrefix(value: string, key: string): string {
  const parts = value.split(".");
  if (!parts.every((p) => SUBJECT_TOKEN.test(p)))
    throw new ConfigError(key, `must be a subject prefix of [A-Za-z0-9_-] tokens without wildcards, e.g. "_INBOX_billing", not ${JSON.stringify(value)}`);
  return value;
}
