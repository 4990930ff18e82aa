import type { Command } from "commander";
import { ArgumentError } from "../core/index.js";
import { type NatsSecurity, redactUrls, urlHasCredentials } from "../bus/index.js";
import { loadConfig } from "../node/index.js";
import { readableFile, secretFromFlags } from "./secret-flags.js";

/** The options every networked CLI command takes to find its cluster and prove who it is. */
export interface TargetOpts {
  server?: string;
  cluster?: string;
  config?: string;
  json?: boolean;
  user?: string;
  passwordEnv?: string;
  passwordFile?: string;
  tokenEnv?: string;
  tokenFile?: string;
  nkeyFile?: string;
  creds?: string;
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  inboxPrefix?: string;
}

/**
 * Adds the target and credential options. Secrets are never flag values (they would show
 * in `ps` and shell history): a flag names the file or the environment variable that holds one.
 */
export function targetOptions(cmd: Command): Command {
  return cmd
    .option("-s, --server <url>", "NATS URL (default: NATS_URL, the config's [nats] urls, or nats://127.0.0.1:4222)")
    .option("--cluster <name>", "cluster name (default: KOVA_CLUSTER, the config's [cluster] name, or default)")
    .option("-c, --config <path>", "kova.toml to take the NATS URL, credentials and cluster name from")
    .option("--creds <file>", "NATS .creds file (JWT + NKey seed)")
    .option("--user <name>", "NATS user (with --password-env or --password-file)")
    .option("--password-env <var>", "environment variable holding the NATS password")
    .option("--password-file <file>", "file holding the NATS password")
    .option("--token-env <var>", "environment variable holding a NATS token")
    .option("--token-file <file>", "file holding a NATS token")
    .option("--nkey-file <file>", "file holding an NKey seed")
    .option("--tls-ca <file>", "CA certificate to verify the server with (PEM)")
    .option("--tls-cert <file>", "client certificate for mutual TLS (PEM)")
    .option("--tls-key <file>", "client key for mutual TLS (PEM)")
    .option("--inbox-prefix <prefix>", "reply inbox prefix your NATS account grants (default _INBOX)");
}

/**
 * Which NATS servers and cluster a command talks to, and with which credentials.
 * Precedence: flags, then the environment (NATS_URL, KOVA_CLUSTER), then the `--config`
 * file, then the defaults a single-node quick start uses.
 * @throws ArgumentError for a --server URL with credentials, a flag naming an unset variable or an unreadable file; ConfigError from --config
 */
export async function resolveTarget(o: TargetOpts): Promise<{ urls: string; cluster: string; security?: NatsSecurity }> {
  if (o.server?.split(",").some(urlHasCredentials)) {
    throw new ArgumentError(
      "--server",
      `${redactUrls(o.server.split(",")).join(",")} holds credentials, which show in \`ps\` and shell history: pass --user with --password-env or --password-file (or --token-env / --token-file, --nkey-file, --creds), or set NATS_URL`,
    );
  }
  let urls = o.server ?? process.env.NATS_URL;
  let cluster = o.cluster ?? process.env.KOVA_CLUSTER;
  let security: NatsSecurity | undefined;
  if (o.config) {
    const cfg = await loadConfig(o.config);
    urls ??= cfg.natsUrls?.join(",");
    cluster ??= cfg.cluster;
    security = cfg.security;
  }
  const flags = securityFromFlags(o);
  if (flags) security = { ...security, ...flags, ...(flags.tls || security?.tls ? { tls: { ...security?.tls, ...flags.tls } } : {}) };
  return { urls: urls ?? "nats://127.0.0.1:4222", cluster: cluster ?? "default", ...(security ? { security } : {}) };
}

function securityFromFlags(o: TargetOpts): NatsSecurity | undefined {
  const sec: NatsSecurity = {};
  if (o.user) sec.user = o.user;
  const password = secretFromFlags(o.passwordEnv, o.passwordFile, "--password-env", "--password-file");
  if (password !== undefined) sec.password = password;
  const token = secretFromFlags(o.tokenEnv, o.tokenFile, "--token-env", "--token-file");
  if (token !== undefined) sec.token = token;
  const seed = secretFromFlags(undefined, o.nkeyFile, "", "--nkey-file");
  if (seed !== undefined) sec.nkeySeed = seed;
  if (o.creds) sec.credsFile = readableFile(o.creds, "--creds");
  const tls = {
    ...(o.tlsCa ? { caFile: readableFile(o.tlsCa, "--tls-ca") } : {}),
    ...(o.tlsCert ? { certFile: readableFile(o.tlsCert, "--tls-cert") } : {}),
    ...(o.tlsKey ? { keyFile: readableFile(o.tlsKey, "--tls-key") } : {}),
  };
  if (Object.keys(tls).length > 0) sec.tls = tls;
  if (o.inboxPrefix) sec.inboxPrefix = o.inboxPrefix;
  return Object.keys(sec).length > 0 ? sec : undefined;
}
