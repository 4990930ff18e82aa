import { join, resolve } from "node:path";
import { Option, type Command } from "commander";
import { ArgumentError } from "../core/index.js";
import { inspectWal, keyFromEnv, readWalRecords, verifyWal, type WalInspection, type WalVerification } from "../wal/index.js";
import {
  ActorTypeRegistry,
  counterActor,
  describeReplay,
  parseTurnRecord,
  replayTurn,
  TURN_KIND,
  type ReplayReport,
  type TurnRecord,
} from "../actors/index.js";
import { defaultConfig, loadConfig, loadActorModules } from "../node/index.js";
import { secretFromFlags } from "./secret-flags.js";

interface KeyOpts {
  keyEnv?: string;
  keyFile?: string;
  hmacKeyEnv?: string;
  hmacKeyFile?: string;
  /** The refused forms that took the key itself as the flag's value. */
  key?: string;
  hmacKey?: string;
  json?: boolean;
  limit?: string;
}

/** Exit code of `kova wal verify` when it finds corruption or a broken chain. */
export const EXIT_CORRUPT = 2;
/** Exit code of `kova wal replay` when today's code parts from a recorded turn. */
export const EXIT_DIVERGED = 3;

/**
 * `kova wal inspect <dir>` and `kova wal verify <dir>`: offline, read-only views of a
 * node's WAL (safe next to a running node). Keys come from the environment variable or
 * the file a flag names (`--key-env` / `--key-file`, `--hmac-key-env` / `--hmac-key-file`;
 * default `KOVA_WAL_KEY`, `KOVA_WAL_HMAC_KEY`), in the forms `hex:…`, `base64:…` or a
 * passphrase, never from a flag's value: that shows in `ps` and in shell history.
 */
export function register(program: Command): void {
  const wal = program.command("wal").description("inspect and verify a node's write-ahead log");
  const keys = (cmd: Command) =>
    cmd
      .option("--key-env <var>", "environment variable holding the encryption key (default: KOVA_WAL_KEY)")
      .option("--key-file <file>", "file holding the encryption key")
      .option("--hmac-key-env <var>", "environment variable holding the HMAC chain key (default: KOVA_WAL_HMAC_KEY)")
      .option("--hmac-key-file <file>", "file holding the HMAC chain key")
      // Still parsed, to refuse them with the fix instead of commander's "unknown option".
      .addOption(new Option("--key <key>").hideHelp())
      .addOption(new Option("--hmac-key <key>").hideHelp())
      .option("--json", "print JSON");

  keys(wal.command("inspect <dir>").description("records with status, head/tail, epoch"))
    .option("--limit <n>", "records to list (newest first)", "50")
    .action((dir: string, o: KeyOpts) => {
      const result = inspectWal(dir, resolveKeys(o));
      if (o.json) return write(JSON.stringify(result, null, 2));
      printInspection(result, Number(o.limit ?? 50));
    });

  keys(wal.command("verify <dir>").description(`check CRC32, authentication and the HMAC chain; exit ${EXIT_CORRUPT} on corruption`)).action(
    (dir: string, o: KeyOpts) => {
      const result = verifyWal(dir, resolveKeys(o));
      if (o.json) write(JSON.stringify(result, null, 2));
      else printVerification(result);
      if (!result.ok) process.exitCode = EXIT_CORRUPT;
    },
  );

  keys(
    wal
      .command("replay <actor>")
      .description(`re-run the actor's recorded turns against today's code; report the first step where they part (exit ${EXIT_DIVERGED})`),
  )
    .option("-c, --config <path>", "kova.toml: its data_dir holds the WAL, its modules define the actor types")
    .option("--dir <dir>", "the WAL directory (default: <data_dir>/wal of the config)")
    .option("--module <file...>", "more modules that define actor types (built JavaScript)")
    .action(async (actorId: string, o: KeyOpts & { config?: string; dir?: string; module?: string[] }) => {
      const reports = await replayActor(actorId, o);
      if (o.json) write(JSON.stringify(reports, null, 2));
      else for (const r of reports) write(typeof r === "string" ? r : describeReplay(r));
      if (reports.some((r) => typeof r !== "string" && r.outcome === "diverged")) process.exitCode = EXIT_DIVERGED;
    });
}

/**
 * Replays every turn of `actorId` its WAL still holds (the newest record of each message),
 * oldest first, each from the type's initial state. A turn whose type this process cannot
 * define (an agent, a workflow run, a swarm coordinator: the node builds those from its
 * runtime) is reported by a line, not replayed: replay it in code with `replayTurn`.
 */
async function replayActor(actorId: string, o: KeyOpts & { config?: string; dir?: string; module?: string[] }): Promise<Array<ReplayReport | string>> {
  const config = o.config ? await loadConfig(o.config) : defaultConfig();
  const modules = (o.module ?? []).map((m) => resolve(m));
  const types = new ActorTypeRegistry([counterActor]);
  await loadActorModules({ ...config, modules: [...config.modules, ...modules] }, types);
  const dir = o.dir ?? join(config.dataDir, "wal");
  const latest = new Map<string, { record: TurnRecord; complete: boolean }>();
  for (const r of readWalRecords(dir, resolveKeys(o), { kind: TURN_KIND, owner: actorId })) {
    const record = parseTurnRecord(r.payload);
    if (record !== undefined) latest.set(record.envelope.id, { record, complete: r.status === "COMPLETE" });
  }
  if (latest.size === 0)
    throw new ArgumentError("actor", `no turn of ${actorId} is left in the WAL at ${dir}: its records were reused by later ones, or it never ran on this node`);
  const out: Array<ReplayReport | string> = [];
  for (const { record, complete } of latest.values()) {
    if (!types.has(record.type)) {
      out.push(
        `${actorId} ${record.envelope.type} ${record.envelope.id}: not replayed: type ${record.type} is not defined here (known: ${types.types().join(", ")}); name its module with --module, or replay it in code with replayTurn`,
      );
      continue;
    }
    out.push(await replayTurn(types.get(record.type), record, { complete }));
  }
  return out;
}

/** @throws ArgumentError for a key given as a flag value, an unset variable or an unreadable file */
function resolveKeys(o: KeyOpts): { key?: string; hmacKey?: string } {
  for (const [given, flag] of [
    [o.key, "--key"],
    [o.hmacKey, "--hmac-key"],
  ] as const) {
    if (given !== undefined) {
      throw new ArgumentError(
        flag,
        `a key given as a flag value shows in \`ps\` and in shell history, so it is not accepted: use ${flag}-env <VAR> or ${flag}-file <PATH> (or set ${flag === "--key" ? "KOVA_WAL_KEY" : "KOVA_WAL_HMAC_KEY"}), and change the key if it was already used this way`,
      );
    }
  }
  const out: { key?: string; hmacKey?: string } = {};
  const key = secretFromFlags(o.keyEnv, o.keyFile, "--key-env", "--key-file") ?? keyFromEnv("KOVA_WAL_KEY");
  const hmacKey = secretFromFlags(o.hmacKeyEnv, o.hmacKeyFile, "--hmac-key-env", "--hmac-key-file") ?? keyFromEnv("KOVA_WAL_HMAC_KEY");
  if (key !== undefined) out.key = key;
  if (hmacKey !== undefined) out.hmacKey = hmacKey;
  return out;
}

function write(text: string): void {
  process.stdout.write(`${text}\n`);
}

function printInspection(r: WalInspection, limit: number): void {
  write(`WAL ${r.dir}`);
  write(`  format v${r.format}, ring 2^${r.ringBits} slots, epoch ${r.epoch}, encryption ${r.encryption ?? "none"}, hmac ${r.hmac ? "on" : "off"}`);
  write(`  tail ${r.tail}, head ${r.head}`);
  const c = r.counts;
  write(`  pending ${c.pending}, complete ${c.complete}, corrupt ${c.corrupt}, quarantined ${c.quarantined}, stale ${c.stale}, overflow ${c.overflow}`);
  if (r.unverified) write("  (no key given: records were not authenticated)");
  for (const n of r.notes) write(`  note: ${n}`);
  const shown = r.records.slice(-limit).reverse();
  if (shown.length > 0) {
    write("  SEQ\tSTATUS\tKIND\tOWNER\tEPOCH\tWHERE");
    for (const x of shown) write(`  ${x.seq}\t${x.status}\t${x.kind}\t${x.owner ?? "-"}\t${x.epoch}\t${x.where === "ring" ? `slot ${x.slot}` : "overflow"}`);
  }
  for (const x of r.corrupt) write(`  CORRUPT seq ${x.seq} (slot ${x.slot}): ${x.reason}`);
}

function printVerification(r: WalVerification): void {
  for (const n of r.notes) write(`note: ${n}`);
  for (const x of r.corrupt) write(`CORRUPT seq ${x.seq} (slot ${x.slot}, ${x.where ?? "ring"}): ${x.reason}`);
  for (const b of r.chainBreaks) write(`CHAIN BREAK at seq ${b.seq}: ${b.reason}`);
  write(r.ok ? `ok: ${r.checked} records checked` : `FAILED: ${r.corrupt.length} corrupt, ${r.chainBreaks.length} chain breaks (${r.checked} records checked)`);
}
