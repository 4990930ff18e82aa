import type { Command } from "commander";
import { ArgumentError, AS_ARGUMENT, durationMs } from "../core/index.js";
import { runSwarm, type StaticSubtask } from "../swarm/index.js";
import { withClient } from "./bus-commands.js";
import { print } from "./output.js";
import { LiveRunTree } from "./run-tree.js";
import { targetOptions, type TargetOpts } from "./target.js";

interface SwarmRunOpts extends TargetOpts {
  coordinator: string;
  follow?: boolean;
  session?: string;
  deadline?: string;
  maxTokens?: string;
  budgetGroup?: string;
  plan?: string;
}

/**
 * Whether `kova swarm run` draws the run tree: as `--follow` / `--no-follow` say, else only
 * when stdout is a terminal and the answer is not asked for as `--json`, so piped output
 * (and JSON) stays the answer alone, for a script to read.
 */
export function followsRunTree(o: { follow?: boolean; json?: boolean }, stdout: { isTTY?: boolean }): boolean {
  return o.follow ?? (o.json !== true && stdout.isTTY === true);
}

/** `kova swarm run "<task>" --coordinator <id> [--follow | --no-follow]` (docs/swarm.md). */
export function register(program: Command): void {
  const swarm = program.command("swarm").description("swarms: a coordinator splits a task over agents and writes one answer");
  targetOptions(swarm.command("run <task>").description("run a swarm and print its answer, after its run tree drawn live on a terminal"))
    .requiredOption("--coordinator <id>", "the coordinator's agent id (a [[swarms]] id)")
    .option(
      "-f, --follow",
      "draw the run tree live (the coordinator, its subtasks' runs and theirs), as kova events tail --tree does; the default when stdout is a terminal (without --json)",
    )
    .option("--no-follow", "print only the answer, also on a terminal")
    .option("--session <id>", "session id of the run tree (default: the run id)")
    .option("--deadline <duration>", 'swarm deadline, e.g. "90s" or "5min" (default: the coordinator\'s)')
    .option("--max-tokens <n>", "max_tokens of the coordinator's own model calls")
    .option("--budget-group <name>", "budget group the subtasks' usage is charged to (default: the session)")
    .option("--plan <json>", 'a static plan instead of the model\'s: [{"task":"...","capability":"research"}]')
    .option("--json", "print the whole result as JSON")
    .action((task: string, o: SwarmRunOpts) =>
      withClient(o, async (client) => {
        const constraints: Record<string, unknown> = {};
        if (o.deadline) {
          durationMs(/^\d+$/.test(o.deadline) ? Number(o.deadline) : o.deadline, "--deadline", AS_ARGUMENT);
          constraints.deadline = /^\d+$/.test(o.deadline) ? Number(o.deadline) : o.deadline;
        }
        if (o.maxTokens) {
          const n = Number(o.maxTokens);
          if (!Number.isInteger(n) || n < 1) throw new ArgumentError("--max-tokens", "must be a positive integer");
          constraints.max_tokens = n;
        }
        if (o.budgetGroup) constraints.budget_group = o.budgetGroup;
        const view = followsRunTree(o, process.stdout) ? new LiveRunTree(process.stdout) : undefined;
        const result = await runSwarm(client, o.coordinator, task, {
          ...(o.session ? { sessionId: o.session } : {}),
          ...(Object.keys(constraints).length ? { constraints } : {}),
          ...(o.plan ? { plan: parsePlan(o.plan) } : {}),
          ...(view ? { onEvent: (e) => void view.apply(e) } : {}),
        }).finally(() => view?.finish());
        if (o.json) return print(result);
        process.stdout.write(`${result.output}\n`);
        process.stderr.write(`run ${result.runId} (session ${result.sessionId}): ${result.usage.inputTokens} in / ${result.usage.outputTokens} out tokens\n`);
      }),
    );
}

function parsePlan(text: string): StaticSubtask[] {
  try {
    return JSON.parse(text) as StaticSubtask[];
  } catch (err) {
    throw new ArgumentError("--plan", `is not valid JSON (${(err as Error).message})`);
  }
}
