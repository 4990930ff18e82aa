import type { Command } from "commander";
import { ArgumentError, durationMs } from "../core/index.js";
import type { KovaClient } from "../bus/index.js";
import {
  cancelExperiment,
  compareExperiments,
  ENDED_STATUSES,
  followExperiment,
  listExperiments,
  loadExperimentFile,
  readExperimentSummary,
  readReport,
  resumeExperiment,
  startExperiment,
  type ExperimentBudget,
  type ExperimentReport,
} from "../eval/index.js";
import { withClient } from "./bus-commands.js";
import { comparisonLine, listRows, planLines, progressLine, reportHeadline, subjectTable, taskTable } from "./eval-format.js";
import { print, table } from "./output.js";
import { targetOptions, type TargetOpts } from "./target.js";

/**
 * `kova eval run|ls|show|cancel|resume|compare` (docs/evals.md, "Commands"). Progress goes
 * to stderr (one line redrawn on a terminal, a line per tenth of the cells otherwise), so
 * stdout is the table, or the report as JSON with `--json`.
 */

interface RunOpts extends TargetOpts {
  id?: string;
  owner?: string;
  detach?: boolean;
  plan?: boolean;
  tasks?: boolean;
}

/** Follows an experiment's run to its end on stderr, then prints its report; exit code 1 unless it completed. */
async function followAndReport(client: KovaClient, experimentId: string, round: number, o: { json?: boolean; tasks?: boolean }): Promise<void> {
  const tty = process.stderr.isTTY === true;
  let shownTenth = -1;
  const stop = new AbortController();
  const onSigint = () => stop.abort();
  process.once("SIGINT", onSigint);
  try {
    for await (const p of followExperiment(client, experimentId, { round, signal: stop.signal })) {
      const line = progressLine(p);
      if (tty) process.stderr.write(`\r\x1b[2K${line}`);
      else {
        const tenth = p.total ? Math.floor(((p.done + p.errors) * 10) / p.total) : 0;
        if (tenth > shownTenth || p.type === "eval_ended") process.stderr.write(`${line}\n`);
        shownTenth = Math.max(shownTenth, tenth);
      }
    }
  } finally {
    process.off("SIGINT", onSigint);
    if (tty) process.stderr.write("\n");
  }
  if (stop.signal.aborted) {
    process.stderr.write(`stopped following; the experiment runs on: kova eval show ${experimentId}  |  kova eval cancel ${experimentId}\n`);
    return;
  }
  await reportOf(client, experimentId, o);
}

/** Prints an experiment's report; exit code 1 unless it completed. */
async function reportOf(client: KovaClient, experimentId: string, o: { json?: boolean; tasks?: boolean }): Promise<void> {
  const report = await readReport(client, experimentId);
  showReport(report, o);
  if (report.status !== "completed") process.exitCode = 1;
}

function showReport(report: ExperimentReport, o: { json?: boolean; tasks?: boolean }): void {
  if (o.json) {
    print(report);
    return;
  }
  process.stdout.write(`${reportHeadline(report)}\n`);
  const t = subjectTable(report);
  table(t.head, t.rows);
  const judged = report.judgeUsage.inputTokens + report.judgeUsage.outputTokens;
  if (judged > 0) process.stdout.write(`judges: ${report.judgeUsage.inputTokens} in / ${report.judgeUsage.outputTokens} out tokens\n`);
  if (o.tasks) {
    process.stdout.write("\n");
    const tt = taskTable(report);
    table(tt.head, tt.rows);
  }
}

function budgetFlags(o: { maxTokens?: string; maxCostUsd?: string; maxWallTime?: string }): ExperimentBudget | undefined {
  const b: ExperimentBudget = {};
  if (o.maxTokens !== undefined) {
    const n = Number(o.maxTokens);
    if (!Number.isInteger(n) || n < 1) throw new ArgumentError("--max-tokens", `must be a positive integer, not ${JSON.stringify(o.maxTokens)}`);
    b.maxTokens = n;
  }
  if (o.maxCostUsd !== undefined) {
    const n = Number(o.maxCostUsd);
    if (!Number.isFinite(n) || n <= 0) throw new ArgumentError("--max-cost-usd", `must be a number above 0, not ${JSON.stringify(o.maxCostUsd)}`);
    b.maxCostUsd = n;
  }
  if (o.maxWallTime !== undefined) {
    try {
      b.maxWallTimeMs = durationMs(/^\d+$/.test(o.maxWallTime) ? Number(o.maxWallTime) : o.maxWallTime, "--max-wall-time");
    } catch (err) {
      throw new ArgumentError("--max-wall-time", (err as Error).message.replace(/^--max-wall-time: /, ""));
    }
  }
  return Object.keys(b).length ? b : undefined;
}

/** `<experiment>[:<subject>]` */
function side(ref: string): { experimentId: string; subject?: string } {
  const [experimentId, subject] = ref.split(":");
  return subject ? { experimentId: experimentId!, subject } : { experimentId: experimentId! };
}

export function register(program: Command): void {
  const ev = program.command("eval").description("evaluations: experiments of subjects × tasks × repetitions, scored and compared");

  targetOptions(
    ev.command("run <spec>").description("start an experiment from a spec file (TOML, or JSON by extension), follow it, print the table per subject"),
  )
    .option("--id <id>", "experiment id (default <name>-<8 hex>)")
    .option(
      "--owner <principal>",
      "start it for a principal (key:<key id> as kova gateway keys ls shows it): its id carries that principal's scope, and the gateway shows it to that key",
    )
    .option("--detach", "return once the experiment started (it runs on the cluster without this command)")
    .option("--plan", "print what the spec expands to and start nothing")
    .option("--tasks", "also print the score of every task per subject")
    .option("--json", "print the report (or with --plan, the expanded spec) as JSON")
    .action(async (file: string, o: RunOpts) => {
      const spec = await loadExperimentFile(file);
      if (o.plan) {
        if (o.json) return print(spec);
        process.stdout.write(`${planLines(spec).join("\n")}\n`);
        return;
      }
      await withClient(o, async (client) => {
        const { experimentId, summary, existing } = await startExperiment(client, spec, {
          ...(o.id ? { experimentId: o.id } : {}),
          ...(o.owner ? { owner: o.owner } : {}),
        });
        const ended = ENDED_STATUSES.includes(summary.status);
        process.stderr.write(
          existing
            ? `experiment ${experimentId} exists (${summary.status}, ${summary.done + summary.errors}/${summary.cells} cells): ${!ended ? "following it" : summary.status === "cancelled" || summary.status === "budget_exhausted" ? `its report follows (kova eval resume ${experimentId} continues it)` : "its report follows"}\n`
            : `started experiment ${experimentId}: ${summary.cells} cells\n`,
        );
        if (o.detach) {
          if (o.json) print({ experimentId, status: summary.status, cells: summary.cells, existing });
          else process.stdout.write(`${experimentId}\nfollow it: kova eval show ${experimentId}  |  kova events tail --session ${experimentId} --tree\n`);
          return;
        }
        await (ended ? reportOf(client, experimentId, o) : followAndReport(client, experimentId, summary.round, o));
      });
    });

  targetOptions(ev.command("ls").description("experiments of the cluster, newest first"))
    .option("--json", "print JSON")
    .action((o: TargetOpts) =>
      withClient(o, async (client) => {
        const list = await listExperiments(client);
        if (o.json) return print(list);
        const t = listRows(list);
        table(t.head, t.rows);
      }),
    );

  targetOptions(ev.command("show <experimentId>").description("an experiment's status and table per subject (live while it runs)"))
    .option("--tasks", "also print the score of every task per subject")
    .option("-f, --follow", "follow a running experiment to its end first")
    .option("--json", "print the report as JSON")
    .action((experimentId: string, o: TargetOpts & { tasks?: boolean; follow?: boolean }) =>
      withClient(o, async (client) => {
        const summary = await readExperimentSummary(client, experimentId);
        if (o.follow && !ENDED_STATUSES.includes(summary.status)) return followAndReport(client, experimentId, summary.round, o);
        const report = await readReport(client, experimentId);
        if (!o.json && !ENDED_STATUSES.includes(summary.status)) {
          // From the records: a passivated experiment's summary knows no counts.
          const finished = report.subjects.reduce((n, x) => n + x.scored + x.errors, 0);
          process.stderr.write(`running: ${finished}/${report.cells} cells${summary.inFlight ? `, ${summary.inFlight} in flight` : ""}\n`);
        }
        showReport(report, o);
      }),
    );

  targetOptions(ev.command("cancel <experimentId>").description("stop a running experiment; what finished stays (kova eval resume continues it)"))
    .option("--reason <text>", "why, kept in its status")
    .option("--json", "print JSON")
    .action((experimentId: string, o: TargetOpts & { reason?: string }) =>
      withClient(o, async (client) => {
        const s = await cancelExperiment(client, experimentId, o.reason);
        if (o.json) return print(s);
        process.stdout.write(`experiment ${experimentId} cancelled after ${s.done}/${s.cells} cells\n`);
      }),
    );

  targetOptions(ev.command("resume <experimentId>").description("continue a cancelled experiment or one stopped at its budget, then follow it"))
    .option("--max-tokens <n>", "new token budget")
    .option("--max-cost-usd <usd>", "new cost budget")
    .option("--max-wall-time <duration>", 'new wall-time budget, from now (e.g. "30m")')
    .option("--detach", "return once it resumed")
    .option("--tasks", "also print the score of every task per subject")
    .option("--json", "print the report as JSON")
    .action((experimentId: string, o: TargetOpts & { maxTokens?: string; maxCostUsd?: string; maxWallTime?: string; detach?: boolean; tasks?: boolean }) =>
      withClient(o, async (client) => {
        const before = await readExperimentSummary(client, experimentId);
        const flags = budgetFlags(o);
        const s = await resumeExperiment(client, experimentId, flags ? { ...before.budget, ...flags } : undefined);
        process.stderr.write(`resumed experiment ${experimentId}: ${s.done}/${s.cells} cells done\n`);
        if (o.detach) return;
        await followAndReport(client, experimentId, s.round, o);
      }),
    );

  targetOptions(ev.command("compare <a> <b>").description("paired comparison by task of two subjects: <experiment>[:<subject>] each"))
    .option("--tasks", "also print each task's scores and difference")
    .option("--json", "print JSON")
    .action((a: string, b: string, o: TargetOpts & { tasks?: boolean }) =>
      withClient(o, async (client) => {
        const c = await compareExperiments(client, side(a), side(b));
        if (o.json) return print(c);
        process.stdout.write(`${comparisonLine(c)}\n`);
        if (o.tasks)
          table(
            ["task", "A", "B", "B − A"],
            c.perTask.map((p) => [p.task, p.a.toFixed(3), p.b.toFixed(3), `${p.difference >= 0 ? "+" : ""}${p.difference.toFixed(3)}`]),
          );
      }),
    );
}
