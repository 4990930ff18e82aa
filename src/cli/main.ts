import { Command, CommanderError } from "commander";
import { KOVA_VERSION, isKovaError } from "../core/index.js";

/**
 * Each command group lives in its own file and registers itself here, so that
 * adding a command never touches another group's code.
 */
type Register = (program: Command) => void;

// One line per command group. Loaded lazily so `kova wal ...` does not pay for NATS.
const groups: Array<() => Promise<{ register: Register }>> = [
  () => import("./wal-commands.js"),
  () => import("./node-commands.js"),
  () => import("./cluster-commands.js"),
  () => import("./bus-commands.js"),
  () => import("./schedule-commands.js"),
  () => import("./workflow-commands.js"),
  () => import("./approval-commands.js"),
  () => import("./tools-commands.js"),
  () => import("./gateway-commands.js"),
  () => import("./swarm-commands.js"),
  () => import("./eval-commands.js"),
];

export async function buildProgram(): Promise<Command> {
  const program = new Command("kova")
    .description("Kova: an actor-model cluster for LLM agents on NATS")
    .version(KOVA_VERSION)
    .showHelpAfterError("(run with --help for usage)");
  for (const load of groups) (await load()).register(program);
  return program;
}

/** CLI entry: parses argv, prints errors with what to do, exits non-zero on failure. */
export async function main(argv: string[]): Promise<void> {
  const program = await buildProgram();
  program.exitOverride();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    const code = isKovaError(err) ? ` [${err.code}]` : "";
    process.stderr.write(`kova: ${err instanceof Error ? err.message : String(err)}${code}\n`);
    process.exitCode = typeof (err as { exitCode?: unknown }).exitCode === "number" ? (err as { exitCode: number }).exitCode : 1;
  }
}
