/**
 * Agents in tool loops as a workload for fault tests and benchmarks (test/e2e's
 * availability test, bench/chaos-agents.mjs): a scripted model that makes every job a loop
 * of `steps` calls of the non-idempotent `ledger_charge` tool (ledger-tool.ts) and then a
 * final answer; a sender that keeps each agent busy with durable `task_delegate` jobs; a
 * reader of the runs' stored events; a fast-path prober that asks every agent like a plain
 * NATS client would; and the lease history, to tell which node held an agent when.
 *
 * What it counts (`report()`): jobs acknowledged by JetStream, ended (completed, failed
 * with the reason the run reported), still open (lost, once the cluster had time to
 * finish them), tool calls the model was told had an unknown outcome (a fault cut them),
 * and (job, step) pairs the ledger holds twice (a tool call that ran twice).
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { type Bus, decodeValue, encodeValue, createEnvelope, isNatsNoResponders, isNatsTimeout, type KovaEvent, type RpcReply } from "../bus/index.js";
import { scriptedReply } from "./scripted-model-replies.js";
import { type ScriptedModelServer, type ScriptedRequest, startScriptedModelServer } from "./scripted-model-server.js";

/** The config module with `ledger_charge`, as node processes load it (built: dist/). */
export const LEDGER_TOOL_MODULE = resolve(import.meta.dirname, "../../dist/testing/ledger-tool.js");

export interface ToolLoopLoadOptions {
  /** Agents `<prefix>-0` … (default 12). */
  agents?: number;
  prefix?: string;
  /** Tool calls per job (default 3). */
  steps?: number;
  /** How long each tool call holds before its effect (default 200 ms). */
  toolHoldMs?: number;
  /** How long the model takes per answer (default 50 ms). */
  modelLatencyMs?: number;
  /** Jobs each agent has open at a time (default 1: the next is sent when one ends). */
  jobsPerAgent?: number;
}

/** A model request of a job, as the scripted model received it: when an agent last ran. */
export interface ModelCall {
  agent: string;
  job: string;
  /** The tool call the model is asked for next (steps + 1: the final answer). */
  step: number;
  /** Epoch ms the request's body had been read. */
  at: number;
}

export interface LedgerEntry {
  agent: string;
  job: string;
  step: number;
  pid: number;
  at: number;
}

export interface JobRecord {
  id: string;
  agent: string;
  /** Epoch ms when JetStream acknowledged it. */
  ackedAt: number;
  endedAt?: number;
  /** run_completed, run_failed or run_cancelled. */
  end?: string;
  /** What a failed run said. */
  error?: string;
  /** @internal when its stored events were last looked through for the run's end */
  scannedAt?: number;
}

export interface ToolLoopReport {
  acked: number;
  done: number;
  failed: number;
  /** Reasons of the failed runs and how often each came. */
  failures: Record<string, number>;
  /** Acknowledged jobs without an end. */
  open: string[];
  /** Tool calls the model was told had an unknown outcome (distinct job/step). */
  outcomeUnknown: number;
  /** (job, step) pairs the ledger holds more than once. */
  doubleEffects: string[];
  /** Tool effects in the ledger. */
  effects: number;
}

export interface ProbeSample {
  agent: string;
  /** Epoch ms the request went out. */
  sentAt: number;
  /** Epoch ms the answer or the error came back. */
  at: number;
  ok: boolean;
  /** The node that answered. */
  node?: string;
  /** timeout, no_responders, or an error code. */
  error?: string;
}

/** What the probes sent within a window got. */
export interface ProbeWindow {
  sent: number;
  answered: number;
  /** answered / sent (1 when none were sent). */
  share: number;
  /** Answers per answering node. */
  byNode: Record<string, number>;
  /** Failures by kind (timeout, no_responders, an error code). */
  failures: Record<string, number>;
  /** Answers from a node that did not hold the agent's lease when it answered. */
  stale: ProbeSample[];
}

export interface Prober {
  readonly samples: readonly ProbeSample[];
  stop(): Promise<ProbeSample[]>;
}

interface LeaseChange {
  at: number;
  node: string | null;
}

/**
 * Creates the model server and the ledger; `toml(modelUrl)` and `modules` go into every
 * node's config, then `start(bus, nc)` once the cluster runs.
 */
export async function createToolLoopLoad(opts: ToolLoopLoadOptions = {}): Promise<ToolLoopLoad> {
  const dir = await mkdtemp(join(tmpdir(), "kova-tool-loop-"));
  const load = new ToolLoopLoad(opts, dir);
  await load.listen();
  return load;
}

export class ToolLoopLoad implements AsyncDisposable {
  readonly agentIds: string[];
  readonly ledgerPath: string;
  private readonly keyPath: string;
  readonly modules = [LEDGER_TOOL_MODULE];
  readonly jobs = new Map<string, JobRecord>();
  /** Distinct "job/step" the model was told had an unknown outcome. */
  readonly unknownOutcomes = new Set<string>();
  model!: ScriptedModelServer;
  private readonly steps: number;
  private readonly holdMs: number;
  private readonly latencyMs: number;
  private readonly depth: number;
  private bus: Bus | undefined;
  private nc: NatsConnection | undefined;
  private sending = false;
  private readonly loops: Promise<void>[] = [];
  private readonly wakers = new Map<string, () => void>();
  private disposed = false;
  private readonly leases = new Map<string, LeaseChange[]>();
  private leaseWatch: { stop(): void } | undefined;
  private seq = 0;
  private readonly modelCallListeners = new Set<(call: ModelCall) => void>();

  constructor(
    opts: ToolLoopLoadOptions,
    private readonly dir: string,
  ) {
    const prefix = opts.prefix ?? "tl";
    this.agentIds = Array.from({ length: opts.agents ?? 12 }, (_, i) => `${prefix}-${i}`);
    this.steps = opts.steps ?? 3;
    this.holdMs = opts.toolHoldMs ?? 200;
    this.latencyMs = opts.modelLatencyMs ?? 50;
    this.depth = opts.jobsPerAgent ?? 1;
    this.ledgerPath = join(dir, "ledger.jsonl");
    this.keyPath = join(dir, "model.key");
  }

  /** @internal created by createToolLoopLoad */
  async listen(): Promise<void> {
    // Not kept: a chaos run makes hundreds of thousands of requests (onModelCall sees each).
    this.model = await startScriptedModelServer({ handler: (req) => this.answer(req), latencyMs: this.latencyMs, keepRequests: false });
    await writeFile(this.keyPath, "scripted\n");
  }

  /** The `[models.main]` and `[[agents]]` tables for a node's kova.toml; `modelUrl` is the model server as the nodes reach it. */
  toml(modelUrl: string = this.model.url): string {
    // A key file: nodes in network namespaces reach the model at a non-loopback address, where a key is required.
    const lines = [`[models.main]`, `base_url = "${modelUrl}"`, `model = "scripted-model"`, `api_key_file = "${this.keyPath}"`];
    for (const id of this.agentIds) lines.push(`[[agents]]`, `id = "${id}"`, `model = "main"`, `system = "Charge each step."`, `tools = ["ledger_charge"]`);
    return lines.join("\n");
  }

  private answer(req: ScriptedRequest) {
    const input = req.messages.find((m) => m.role === "user")?.content;
    const m = typeof input === "string" ? /^job (\S+) agent (\S+)$/.exec(input) : null;
    if (!m) return scriptedReply.text("not a job of this load");
    const [, job, agent] = m as unknown as [string, string, string];
    const results = req.messages.filter((x) => x.role === "tool");
    for (const r of results) {
      if (typeof r.content === "string" && r.content.includes("TOOL_OUTCOME_UNKNOWN")) this.unknownOutcomes.add(`${job}/${r.tool_call_id?.split(":").at(-1)}`);
    }
    const step = results.length + 1;
    for (const listener of this.modelCallListeners) listener({ agent, job, step, at: req.at });
    if (step > this.steps) return scriptedReply.text(`done ${job}`);
    return scriptedReply.toolCalls([
      { id: `${job}:${step}`, name: "ledger_charge", arguments: { ledger: this.ledgerPath, agent, job, step, holdMs: this.holdMs } },
    ]);
  }

  /**
   * Calls `listener` with every model request of a job as it arrives: the moment an agent
   * runs again after a fault (bench/chaos-agents.mjs measures takeovers by it).
   * @returns a function that removes the listener
   */
  onModelCall(listener: (call: ModelCall) => void): () => void {
    this.modelCallListeners.add(listener);
    return () => this.modelCallListeners.delete(listener);
  }

  /** Starts the job loops (one per agent and depth), the event reader and the lease watch. */
  async start(bus: Bus, nc: NatsConnection): Promise<void> {
    this.bus = bus;
    this.nc = nc;
    const kv = await new Kvm(nc).open(bus.subjects.kv.leases);
    await this.watchLeases(kv);
    void this.reconcile();
    this.sending = true;
    for (const agent of this.agentIds) for (let i = 0; i < this.depth; i++) this.loops.push(this.loop(agent));
  }

  private async watchLeases(kv: KV): Promise<void> {
    const iter = await kv.watch();
    this.leaseWatch = iter;
    void (async () => {
      for await (const e of iter) {
        let node: string | null = null;
        if (e.operation === "PUT") {
          try {
            node = (e.json<{ node: string | null }>().node as string | null) ?? null;
          } catch {
            node = null;
          }
        }
        const list = this.leases.get(e.key) ?? [];
        list.push({ at: e.created.getTime(), node });
        this.leases.set(e.key, list);
      }
    })().catch(() => undefined);
  }

  /** The node that held `agent`'s lease at epoch ms `t`, as the server recorded the writes. */
  holderAt(agent: string, t: number): string | null {
    let holder: string | null = null;
    for (const c of this.leases.get(agent) ?? []) {
      if (c.at > t) break;
      holder = c.node;
    }
    return holder;
  }

  /** The lease writes of `agent` seen so far: server time and the node named (null: released or deleted). */
  leaseHistory(agent: string): ReadonlyArray<{ at: number; node: string | null }> {
    return this.leases.get(agent) ?? [];
  }

  /** Whether `node` held the lease at some moment within `slackMs` of `t`. */
  heldNear(agent: string, node: string, t: number, slackMs = 200): boolean {
    if (this.holderAt(agent, t - slackMs) === node) return true;
    return (this.leases.get(agent) ?? []).some((c) => c.node === node && c.at >= t - slackMs && c.at <= t + slackMs);
  }

  /**
   * Finds the jobs that ended: a run's last event is always `run_stream_end` (with its
   * status), so one STREAM.MSG.GET per open job a tick says whether it ended. Plain
   * requests, each on its own: a NATS server lost or a leader election costs a tick, where
   * a long-lived consumer would have to notice that it stopped.
   */
  private async reconcile(): Promise<void> {
    while (!this.disposed) {
      const open = [...this.jobs.values()].filter((j) => !j.end);
      await Promise.all(open.map((j) => this.checkEnded(j).catch(() => undefined)));
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  private async checkEnded(job: JobRecord): Promise<void> {
    const bus = this.bus!;
    // A task without a sessionId is a session of its own run.
    const subject = bus.subjects.events(job.id, job.id);
    const last = await bus.jsm.streams.getMessage(bus.subjects.streams.events, { last_by_subj: subject });
    let e = last?.json<KovaEvent>();
    // A node frozen during a model call and woken after its agent moved on publishes that
    // call's model_response when it wakes (a paid call, for usage accounting), possibly after
    // the new host ended the run: a job open for a while is looked up in all its events.
    if (e && e.type !== "run_stream_end" && Date.now() - job.ackedAt > 10_000 && Date.now() - (job.scannedAt ?? 0) > 5_000) {
      job.scannedAt = Date.now();
      e = (await this.endOf(subject)) ?? e;
    }
    if (e?.type !== "run_stream_end" || job.end) return;
    const status = (e.data as { status?: string } | undefined)?.status;
    if (status !== "completed") job.error = await this.failureOf(subject).catch((err: unknown) => `its events could not be read: ${String(err)}`);
    job.end = status === "completed" ? "run_completed" : status === "failed" ? "run_failed" : "run_cancelled";
    job.endedAt = Date.now();
    this.wakers.get(job.id)?.();
  }

  /** The run's run_stream_end event among its stored events, if it has one (the read stops at the last stored one, or after 5 s). */
  private async endOf(subject: string): Promise<KovaEvent | undefined> {
    const reader = await this.bus!.readStoredEvents(subject);
    const timer = setTimeout(() => reader.close(), 5_000);
    try {
      for await (const m of reader.messages) {
        const e = m.json<KovaEvent>();
        if (e.type === "run_stream_end") return e;
        if (m.info.pending === 0) return undefined;
      }
      return undefined;
    } finally {
      clearTimeout(timer);
      reader.close();
    }
  }

  /** What a run that did not complete said: its run_failed event's error, else its end status. */
  private async failureOf(subject: string): Promise<string> {
    const reader = await this.bus!.readStoredEvents(subject);
    try {
      for await (const m of reader.messages) {
        const e = m.json<KovaEvent>();
        if (e.type === "run_failed") {
          const err = (e.data as { error?: { code?: string; message?: string } } | undefined)?.error;
          return `${err?.code ?? "?"}: ${err?.message ?? ""}`;
        }
        if (e.type === "run_stream_end") return `ended ${String((e.data as { status?: string } | undefined)?.status)}`;
      }
      return "no end event";
    } finally {
      reader.close();
    }
  }

  private async loop(agent: string): Promise<void> {
    const bus = this.bus!;
    while (this.sending) {
      const id = `j${(this.seq++).toString(36)}-${randomUUID().slice(0, 8)}`;
      const env = createEnvelope({ from: "tool-loop-load", to: agent, type: "task_delegate", payload: { input: `job ${id} agent ${agent}`, runId: id } });
      // Sent until JetStream acknowledges it (a NATS server may be down); the same envelope
      // id each time, so the stream's duplicate window stores it once.
      for (;;) {
        try {
          await bus.send(env, { timeoutMs: 5_000 });
          break;
        } catch {
          if (!this.sending) return;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
      const record: JobRecord = { id, agent, ackedAt: Date.now() };
      this.jobs.set(id, record);
      await new Promise<void>((r) => {
        if (record.end || !this.sending) return r();
        this.wakers.set(id, r);
      });
      this.wakers.delete(id);
    }
  }

  /** Stops sending new jobs (open ones still end). */
  async stopSending(): Promise<void> {
    this.sending = false;
    for (const wake of this.wakers.values()) wake();
    await Promise.all(this.loops);
  }

  /** Waits until every acknowledged job has ended, for at most `timeoutMs`; returns the open ones. */
  async drain(timeoutMs: number): Promise<string[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const open = [...this.jobs.values()].filter((j) => !j.end).map((j) => j.id);
      if (open.length === 0 || Date.now() > deadline) return open;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async ledger(): Promise<LedgerEntry[]> {
    const text = await readFile(this.ledgerPath, "utf8").catch(() => "");
    return text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as LedgerEntry);
  }

  async report(): Promise<ToolLoopReport> {
    const ledger = await this.ledger();
    const seen = new Map<string, number>();
    for (const e of ledger) seen.set(`${e.job}/${e.step}`, (seen.get(`${e.job}/${e.step}`) ?? 0) + 1);
    const jobs = [...this.jobs.values()];
    const failures: Record<string, number> = {};
    for (const j of jobs) if (j.end === "run_failed") failures[j.error ?? "?"] = (failures[j.error ?? "?"] ?? 0) + 1;
    return {
      acked: jobs.length,
      done: jobs.filter((j) => j.end === "run_completed").length,
      failed: jobs.filter((j) => j.end === "run_failed" || j.end === "run_cancelled").length,
      failures,
      open: jobs.filter((j) => !j.end).map((j) => j.id),
      outcomeUnknown: this.unknownOutcomes.size,
      doubleEffects: [...seen].filter(([, n]) => n > 1).map(([k]) => k),
      effects: ledger.length,
    };
  }

  /**
   * Asks every agent `perSecond` times a second with an `info_request` on its rpc subject,
   * as a plain NATS client: one request each, `timeoutMs` to answer, no retries.
   */
  probe(nc: NatsConnection = this.nc!, opts: { perSecond?: number; timeoutMs?: number } = {}): Prober {
    const bus = this.bus!;
    const samples: ProbeSample[] = [];
    const every = 1000 / (opts.perSecond ?? 10);
    const timeout = opts.timeoutMs ?? 1000;
    const inflight = new Set<Promise<void>>();
    const ask = (agent: string) => {
      const sentAt = Date.now();
      const env = createEnvelope({ from: "prober", to: agent, type: "info_request", payload: {} });
      const p = nc
        .request(bus.subjects.rpc(agent), encodeValue(env, "msgpack"), { timeout })
        .then(
          (msg) => {
            const r = decodeValue(msg.data, "msgpack") as RpcReply;
            samples.push({ agent, sentAt, at: Date.now(), ok: r.ok === true, ...(r.node ? { node: r.node } : {}), ...(r.ok ? {} : { error: r.error.code }) });
          },
          (err: unknown) => {
            const kind = isNatsNoResponders(err) ? "no_responders" : isNatsTimeout(err) ? "timeout" : String(err);
            samples.push({ agent, sentAt, at: Date.now(), ok: false, error: kind });
          },
        )
        .finally(() => inflight.delete(p));
      inflight.add(p);
    };
    const timers = this.agentIds.map((agent, i) => {
      // Spread the agents over the interval, so requests do not go out in bursts.
      const t = setTimeout(
        () => {
          ask(agent);
          timers[i] = setInterval(() => ask(agent), every);
        },
        (every * i) / this.agentIds.length,
      );
      return t;
    });
    return {
      samples,
      stop: async () => {
        for (const t of timers) clearTimeout(t);
        await Promise.all([...inflight]);
        return samples;
      },
    };
  }

  /** The probes sent within [from, to) (epoch ms): how many were answered, by whom, and which answers came from a node without the lease. */
  probeWindow(samples: readonly ProbeSample[], from: number, to: number): ProbeWindow {
    const inWindow = samples.filter((x) => x.sentAt >= from && x.sentAt < to);
    const answered = inWindow.filter((x) => x.ok);
    const byNode: Record<string, number> = {};
    for (const x of answered) byNode[x.node ?? "?"] = (byNode[x.node ?? "?"] ?? 0) + 1;
    const failures: Record<string, number> = {};
    for (const x of inWindow) if (!x.ok) failures[x.error ?? "?"] = (failures[x.error ?? "?"] ?? 0) + 1;
    return {
      sent: inWindow.length,
      answered: answered.length,
      share: inWindow.length === 0 ? 1 : answered.length / inWindow.length,
      byNode,
      failures,
      stale: answered.filter((x) => x.node === undefined || !this.heldNear(x.agent, x.node, x.at)),
    };
  }

  /**
   * How long after `from` every agent answered every probe until `to`: the send time of the
   * last unanswered probe sent within [from, to), minus `from` (0 when none failed).
   */
  allAnsweringAfter(samples: readonly ProbeSample[], from: number, to: number): number {
    let last = from;
    for (const x of samples) if (!x.ok && x.sentAt >= from && x.sentAt < to && x.sentAt > last) last = x.sentAt;
    return last - from;
  }

  async dispose(): Promise<void> {
    this.sending = false;
    for (const wake of this.wakers.values()) wake();
    this.disposed = true;
    this.leaseWatch?.stop();
    await this.model?.close();
    await rm(this.dir, { recursive: true, force: true });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}
