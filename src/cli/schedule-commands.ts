import type { Command } from "commander";
import { ArgumentError } from "../core/index.js";
import { controlRequest, schedulesSubject } from "../cluster/index.js";
import { type ScheduleView, scheduleTarget } from "../node/index.js";
import { withCluster } from "./cluster-commands.js";
import { print, table } from "./output.js";
import { targetOptions, type TargetOpts } from "./target.js";
import { parseInputs } from "./workflow-commands.js";
import { loadWorkflowFile } from "../workflow/index.js";

interface AddOpts extends TargetOpts {
  cron?: string;
  every?: string;
  tz?: string;
  to?: string;
  workflow?: string;
  type?: string;
  payload?: string;
  input: string[];
  catchUp?: string;
}

/**
 * `kova schedules add|ls|rm`: messages sent on a cron expression or an interval, fired
 * once per tick across the cluster (docs/cluster.md, "Schedules"). Any node answers.
 */
export function register(program: Command): void {
  const schedules = program.command("schedules").description("messages sent on a schedule (cron or interval), once per tick across the cluster");
  targetOptions(schedules.command("add <id>").description("add or update a schedule"))
    .option("--cron <expr>", 'cron expression, e.g. "0 8 * * 1-5" (minute hour day month weekday)')
    .option("--every <duration>", 'interval instead of cron, e.g. "30s", "15m", "1h"')
    .option("--tz <zone>", "time zone of the cron expression (default UTC), e.g. Europe/Berlin")
    .option("--to <agentId>", "the agent (or template instance) the message goes to")
    .option("--workflow <file>", "instead of --to: start one run of this workflow file (TOML or JSON) per tick")
    .option("-t, --type <type>", "message type (default task_delegate)")
    .option("-p, --payload <json>", "payload as JSON")
    .option(
      "--input <value>",
      'with --to, shorthand for --payload \'{"input": "<text>"}\'; with --workflow, the run\'s input: name=value (repeatable) or a JSON object',
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option("--catch-up <policy>", "after all nodes were down: skip the missed ticks, or run_once for them", "skip")
    .action((id: string, o: AddOpts) =>
      withCluster(o, async (nc, cluster) => {
        const schedule: Record<string, unknown> = { id, ...(await targetOf(o)), catch_up: o.catchUp };
        if (o.cron !== undefined) schedule.cron = o.cron;
        if (o.every !== undefined) schedule.every = /^\d+$/.test(o.every) ? Number(o.every) : o.every;
        if (o.tz !== undefined) schedule.tz = o.tz;
        const r = await controlRequest<{ created: boolean; warning?: string }>(nc, schedulesSubject(cluster), { op: "add", schedule });
        process.stdout.write(`${r.created ? "added" : "updated"} schedule ${id}\n`);
        if (r.warning) process.stderr.write(`warning: ${r.warning}\n`);
      }),
    );
  targetOptions(schedules.command("ls").description("list schedules with their next fire times"))
    .option("--json", "print JSON")
    .action((o: TargetOpts) =>
      withCluster(o, async (nc, cluster) => {
        const list = await controlRequest<ScheduleView[]>(nc, schedulesSubject(cluster), { op: "ls" });
        if (o.json) return print(list);
        table(
          ["ID", "WHEN", "TO", "TYPE", "CATCH-UP", "LAST TICK", "NEXT"],
          list.map((s) => [
            s.spec.id,
            s.spec.cron ? `cron ${s.spec.cron}${s.spec.tz ? ` (${s.spec.tz})` : ""}` : `every ${s.spec.everyMs} ms`,
            scheduleTarget(s.spec),
            s.spec.workflow ? "workflow.start" : (s.spec.type ?? ""),
            s.spec.catchUp,
            new Date(s.lastTick).toISOString(),
            s.next.map((t) => new Date(t).toISOString()).join(", "),
          ]),
        );
      }),
    );
  targetOptions(schedules.command("rm <id>").description("remove a schedule")).action((id: string, o: TargetOpts) =>
    withCluster(o, async (nc, cluster) => {
      const r = await controlRequest<{ removed: boolean }>(nc, schedulesSubject(cluster), { op: "rm", id });
      if (!r.removed) throw new ArgumentError("id", `no schedule ${id}: see kova schedules ls`);
      process.stdout.write(`removed schedule ${id}\n`);
    }),
  );
}

/**
 * What the schedule sends: a message (`--to`), or runs of a workflow (`--workflow`), whose
 * file is read and checked here so that the stored schedule never depends on it again.
 */
async function targetOf(o: AddOpts): Promise<Record<string, unknown>> {
  if ((o.to === undefined) === (o.workflow === undefined))
    throw new ArgumentError("--to", "give --to <agentId> (a message) or --workflow <file> (a run per tick)");
  if (o.workflow === undefined) return { to: o.to, type: o.type ?? "task_delegate", payload: payloadOf(o) };
  for (const [flag, v] of [
    ["--type", o.type],
    ["--payload", o.payload],
  ] as const) {
    if (v !== undefined) throw new ArgumentError(flag, "is for a message schedule (--to): a workflow schedule takes --input");
  }
  const { raw } = await loadWorkflowFile(o.workflow);
  return { workflow: raw, input: parseInputs(o.input) };
}

function payloadOf(o: AddOpts): unknown {
  if (o.input.length > 1) throw new ArgumentError("--input", "a message schedule takes one --input text (or --payload)");
  const input = o.input[0];
  if (input !== undefined && o.payload !== undefined) throw new ArgumentError("--input", "give --input or --payload, not both");
  if (input !== undefined) return { input };
  if (o.payload === undefined) return null;
  try {
    return JSON.parse(o.payload) as unknown;
  } catch (err) {
    throw new ArgumentError("--payload", `is not JSON (${(err as Error).message}): quote it, e.g. --payload '{"input":"hi"}'`);
  }
}
